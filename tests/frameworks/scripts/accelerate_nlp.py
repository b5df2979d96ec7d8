"""Sequence-pair classification in the shape of accelerate's examples/nlp_example.py: evaluate,
torch and datasets imported first, a dataset of sentence pairs (the shape of GLUE's MRPC, read here
from a local CSV), tokenized under ``accelerator.main_process_first()``, padded by a collate
function, a BERT classifier (made from its config: nothing is downloaded), AdamW with a linear
schedule, ``accelerator.prepare``, gradient accumulation by ``step % accumulation == 0`` as the
example does it, and an evaluation with ``gather_for_metrics`` after each epoch. It knows nothing
of mgpu-tui. Each rank prints its own account at the end:
    RESULT {"rank": 0, "world_size": 2, "steps": 8, "batch": 8, "accumulation": 2,
            "losses": [...], "accuracy": 0.5}
where losses are each optimizer step's: the sum of its micro-batches' (each divided by the
accumulation count, as the example divides it). ``FAIL_RANK=N`` plants a bad label in rank N's
third batch (an IndexError in the loss, as a dataset with a wrong label count gives).
"""

import argparse
import json
import os
import sys

import evaluate  # noqa: F401 (the example imports it first: it looks for torch before torch is imported)
import torch
from accelerate import Accelerator
from datasets import load_dataset
from torch.optim import AdamW
from torch.utils.data import DataLoader
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    BertConfig,
    get_linear_schedule_with_warmup,
    set_seed,
)

MAX_BATCH_SIZE = 8


def get_dataloaders(accelerator, data, batch_size):
    tokenizer = AutoTokenizer.from_pretrained(os.path.join(data, "tokenizer"))
    files = {split: os.path.join(data, f"pairs_{split}.csv") for split in ("train", "validation")}
    datasets = load_dataset("csv", data_files=files)

    def tokenize_function(examples):
        return tokenizer(examples["sentence1"], examples["sentence2"], truncation=True, max_length=64)

    with accelerator.main_process_first():
        tokenized = datasets.map(
            tokenize_function, batched=True, remove_columns=["idx", "sentence1", "sentence2"]
        )
    tokenized = tokenized.rename_column("label", "labels")

    def collate_fn(examples):
        return tokenizer.pad(examples, padding="longest", return_tensors="pt")

    train = DataLoader(
        tokenized["train"], shuffle=True, collate_fn=collate_fn, batch_size=batch_size, drop_last=True
    )
    evaluation = DataLoader(tokenized["validation"], shuffle=False, collate_fn=collate_fn, batch_size=16)
    return tokenizer, train, evaluation


def training_function(config, args):
    accelerator = Accelerator()
    lr, epochs, seed, batch_size = config["lr"], config["num_epochs"], config["seed"], config["batch_size"]
    accumulation = 1
    if batch_size > MAX_BATCH_SIZE:
        accumulation = batch_size // MAX_BATCH_SIZE
        batch_size = MAX_BATCH_SIZE
    set_seed(seed)
    tokenizer, train_dataloader, eval_dataloader = get_dataloaders(accelerator, args.data, batch_size)
    config = BertConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=128, num_labels=2,
    )  # fmt: skip
    model = AutoModelForSequenceClassification.from_config(config)
    model = model.to(accelerator.device)
    optimizer = AdamW(params=model.parameters(), lr=lr)
    lr_scheduler = get_linear_schedule_with_warmup(
        optimizer=optimizer,
        num_warmup_steps=2,
        num_training_steps=(len(train_dataloader) * epochs) // accumulation,
    )
    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler
    )
    fail = os.environ.get("FAIL_RANK") == str(accelerator.process_index)
    losses, step_loss, correct, seen = [], 0.0, 0, 0
    for _ in range(epochs):
        model.train()
        for step, batch in enumerate(train_dataloader):
            if fail and step == 2:
                batch["labels"][0] = 10**6
            batch.to(accelerator.device)
            outputs = model(**batch)
            loss = outputs.loss
            loss = loss / accumulation
            step_loss += loss.item()
            accelerator.backward(loss)
            if step % accumulation == 0:
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
                losses.append(step_loss)
                step_loss = 0.0
        model.eval()
        for batch in eval_dataloader:
            batch.to(accelerator.device)
            with torch.no_grad():
                outputs = model(**batch)
            predictions = outputs.logits.argmax(dim=-1)
            predictions, references = accelerator.gather_for_metrics((predictions, batch["labels"]))
            correct += int((predictions == references).sum())
            seen += len(references)
        accelerator.print(f"epoch accuracy: {correct / seen:.3f}")
    result = {
        "rank": accelerator.process_index,
        "world_size": accelerator.num_processes,
        "steps": len(losses),
        "batch": batch_size,
        "accumulation": accumulation,
        "losses": losses,
        "accuracy": correct / seen,
    }
    sys.stdout.write(f"RESULT {json.dumps(result)}\n")
    sys.stdout.flush()


def main():
    parser = argparse.ArgumentParser(description="Simple example of training script.")
    parser.add_argument("--data", required=True)
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    config = {"lr": 2e-4, "num_epochs": args.epochs, "seed": 42, "batch_size": 16}
    training_function(config, args)


if __name__ == "__main__":
    main()
