"""Causal-LM fine-tuning in the shape of transformers' examples/pytorch/language-modeling/run_clm.py:
datasets and evaluate imported before torch, HfArgumentParser over model, data and training
arguments, a text file read by load_dataset("text"), tokenized and grouped into blocks, a model
made from its config (nothing downloaded), Trainer.train(). It knows nothing of mgpu-tui. Each rank
prints its own account at the end:
    RESULT {"rank": 0, "world_size": 2, "steps": 6, "batch": 4, "accumulation": 2, "block": 16,
            "log": [{"step": 2, "loss": 2.5}, ...]}
where log is the Trainer's own logged loss (every ``logging_steps``: the mean over the ranks and
over those steps of each step's loss). ``FAIL_RANK=N`` plants a label out of the vocabulary in
rank N's third batch (an IndexError in the loss, as a tokenizer larger than the model gives).
"""

import json
import os
import sys
from dataclasses import dataclass, field
from itertools import chain

import datasets
import evaluate  # noqa: F401 (run_clm imports it at the top: it looks for torch before torch is imported)
import torch  # noqa: F401
import transformers
from datasets import load_dataset
from transformers import (
    CONFIG_MAPPING,
    AutoModelForCausalLM,
    AutoTokenizer,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
    default_data_collator,
    set_seed,
)


@dataclass
class ModelArguments:
    model_type: str = field(default="gpt2")
    config_overrides: str = field(default="n_embd=32,n_layer=2,n_head=2,n_positions=64")
    tokenizer_name: str = field(default=None)


@dataclass
class DataTrainingArguments:
    train_file: str = field(default=None)
    block_size: int = field(default=16)


def planted(collate, rank):
    """The collator, or where FAIL_RANK names this rank, one whose third batch has a bad label."""
    if os.environ.get("FAIL_RANK") != str(rank):
        return collate
    batches = []

    def collate_and_plant(features):
        batch = collate(features)
        batches.append(None)
        if len(batches) == 3:
            batch["labels"][0, -1] = 10**6
        return batch

    return collate_and_plant


def main():
    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, TrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses()
    datasets.utils.logging.set_verbosity_warning()
    transformers.utils.logging.set_verbosity_warning()
    set_seed(training_args.seed)
    raw = load_dataset("text", data_files={"train": data_args.train_file})
    tokenizer = AutoTokenizer.from_pretrained(model_args.tokenizer_name)
    config = CONFIG_MAPPING[model_args.model_type]()
    config.update_from_string(model_args.config_overrides)
    config.vocab_size = len(tokenizer)
    model = AutoModelForCausalLM.from_config(config)

    def tokenize_function(examples):
        return tokenizer(examples["text"])

    with training_args.main_process_first(desc="dataset map tokenization"):
        tokenized = raw.map(tokenize_function, batched=True, remove_columns=["text"])
    block = data_args.block_size

    def group_texts(examples):
        joined = {k: list(chain(*examples[k])) for k in examples.keys()}
        total = (len(joined[list(examples.keys())[0]]) // block) * block
        result = {k: [t[i : i + block] for i in range(0, total, block)] for k, t in joined.items()}
        result["labels"] = result["input_ids"].copy()
        return result

    with training_args.main_process_first(desc="grouping texts together"):
        lm_datasets = tokenized.map(group_texts, batched=True)
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=lm_datasets["train"],
        processing_class=tokenizer,
        data_collator=planted(default_data_collator, training_args.process_index),
    )
    trainer.train()
    log = [{"step": e["step"], "loss": e["loss"]} for e in trainer.state.log_history if "loss" in e]
    result = {
        "rank": training_args.process_index,
        "world_size": training_args.world_size,
        "steps": trainer.state.global_step,
        "batch": training_args.per_device_train_batch_size,
        "accumulation": training_args.gradient_accumulation_steps,
        "block": block,
        "log": log,
    }
    sys.stdout.write(f"RESULT {json.dumps(result)}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
