"""Local data for the Hugging Face shapes (nothing is fetched, at test time or ever): a text file
for causal-LM fine-tuning (run_clm's ``--train_file``), a CSV of sentence pairs with labels (the
shape of GLUE's MRPC, which accelerate's nlp_example reads), and a word-level tokenizer saved as
``AutoTokenizer.from_pretrained`` reads one. Run as ``python hf_local_data.py FOLDER``."""

import csv
import os
import random
import sys

from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

WORDS = "the gpu rank step loss model data train fast slow all reduce ring tree host link".split()


def sentence(rnd):
    return " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(4, 14)))


def main(out):
    os.makedirs(out, exist_ok=True)
    rnd = random.Random(0)
    with open(os.path.join(out, "train.txt"), "w") as f:
        f.writelines(sentence(rnd) + "\n" for _ in range(400))
    for split, count in (("train", 256), ("validation", 64)):
        with open(os.path.join(out, f"pairs_{split}.csv"), "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["sentence1", "sentence2", "label", "idx"])
            for i in range(count):
                first = sentence(rnd)
                same = rnd.random() < 0.5
                writer.writerow([first, first if same else sentence(rnd), int(same), i])
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[EOS]"]
    vocab = {w: i for i, w in enumerate(special + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="$A", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        eos_token="[EOS]",
    )
    fast.save_pretrained(os.path.join(out, "tokenizer"))


if __name__ == "__main__":
    main(sys.argv[1])
