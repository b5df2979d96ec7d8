"""A Hugging Face Trainer script in the shape of its docs: a model (a small GPT-2 made from its
config: nothing is downloaded), a Dataset of token ids, TrainingArguments with gradient
accumulation, Trainer.train(). It knows nothing of mgpu-tui. Each rank prints its own account:
    RESULT {"rank": 0, "world_size": 2, "steps": 6, "batch": 4, "accumulation": 2,
            "losses": [...], "samples_per_second": 12.3}
where losses are the Trainer's own logged loss at each step (every rank's mean).
"""

import json
import os
import sys
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

BATCH, ACCUMULATION, SEQ = 4, 2, 16
STEPS = int(os.environ.get("HF_STEPS", "6"))
ON_GPU = os.environ.get("HF_ON_GPU") == "1"  # on a GPU box (scripts/gpu_check.py); else the CPU


class Tokens(torch.utils.data.Dataset):
    def __init__(self, count):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 100, (count, SEQ), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main():
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=100, n_positions=SEQ, n_embd=32, n_layer=2, n_head=2)
    model = GPT2LMHeadModel(config)
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out,
            per_device_train_batch_size=BATCH,
            gradient_accumulation_steps=ACCUMULATION,
            max_steps=STEPS,
            logging_steps=1,
            learning_rate=1e-3,
            report_to=[],
            save_strategy="no",
            use_cpu=not ON_GPU,
            disable_tqdm=True,
            dataloader_num_workers=0,
        )
        trainer = Trainer(
            model=model, args=args, train_dataset=Tokens(max(256, STEPS * BATCH * ACCUMULATION))
        )
        output = trainer.train()
    logged = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    result = {
        "rank": args.process_index,
        "world_size": args.world_size,
        "steps": trainer.state.global_step,
        "batch": BATCH,
        "accumulation": ACCUMULATION,
        "losses": logged,
        "samples_per_second": output.metrics.get("train_samples_per_second"),
    }
    sys.stdout.write(f"RESULT {json.dumps(result)}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
