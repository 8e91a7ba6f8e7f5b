"""Tiny local copies of the public preference sets, in each dataset's own repository layout.

`datasets.load_dataset(folder, ...)` reads them exactly as it reads the hub repositories:

- Anthropic/hh-rlhf: `<subset>/{train,test}.jsonl.gz`, rows {"chosen": transcript, "rejected": transcript};
- nvidia/HelpSteer3: a README with a "preference" config over `preference/{train,validation}.jsonl.gz`,
  rows {domain, language, context: [messages], response1, response2, overall_preference, ...};
- HuggingFaceH4/ultrafeedback_binarized: `data/<split>-00000-of-00001.parquet` for the splits
  train_prefs, test_prefs (and train_sft, which the builder ignores), rows {prompt, prompt_id,
  chosen: [messages], rejected: [messages], messages, score_chosen, score_rejected}.
"""

import gzip
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HH_TRAIN = [
    {"chosen": "\n\nHuman: What is the capital of France?\n\nAssistant: Paris.",
     "rejected": "\n\nHuman: What is the capital of France?\n\nAssistant: I don't know."},
    {"chosen": "\n\nHuman: Hi\n\nAssistant: Hello! How can I help?\n\nHuman: Tell me a joke.\n\nAssistant: "
               "Why did the bicycle fall over? It was two-tired.",
     "rejected": "\n\nHuman: Hi\n\nAssistant: Hello! How can I help?\n\nHuman: Tell me a joke.\n\nAssistant: No."},
    # The transcripts differ before the last turn: not a usable comparison, skipped.
    {"chosen": "\n\nHuman: A\n\nAssistant: B", "rejected": "\n\nHuman: C\n\nAssistant: D"},
]
HH_TEST = [
    {"chosen": "\n\nHuman: How do I boil an egg?\n\nAssistant: Put it in boiling water for 8 minutes.",
     "rejected": "\n\nHuman: How do I boil an egg?\n\nAssistant: Eggs cannot be boiled."},
]

HS3_README = """---
configs:
- config_name: preference
  data_files:
  - split: train
    path: preference/train.jsonl.gz
  - split: validation
    path: preference/validation.jsonl.gz
---
# HelpSteer3 (test fixture)
"""
HS3_TRAIN = [
    {"domain": "general", "language": "english", "context": [{"role": "user", "content": "Name a color."}],
     "response1": "Blue.", "response2": "Blue is a color of the sky.", "overall_preference": -2,
     "individual_preference": [{"score": -2, "reasoning": "shorter"}]},
    {"domain": "code", "language": "python",
     "context": [{"role": "user", "content": "Print hi in Python."},
                 {"role": "assistant", "content": "print('hi')"},
                 {"role": "user", "content": "And in C?"}],
     "response1": "puts hi", "response2": "printf(\"hi\\n\");", "overall_preference": 3,
     "individual_preference": []},
    {"domain": "general", "language": "english", "context": [{"role": "user", "content": "Flip a coin."}],
     "response1": "Heads.", "response2": "Tails.", "overall_preference": 0, "individual_preference": []},
]
HS3_VALIDATION = [
    {"domain": "stem", "language": "english", "context": [{"role": "user", "content": "2+2?"}],
     "response1": "5", "response2": "4", "overall_preference": 1, "individual_preference": []},
]


def _uf_row(prompt: str, chosen: str, rejected: str, score_chosen: float, score_rejected: float) -> dict[str, Any]:
    user = {"content": prompt, "role": "user"}
    return {"prompt": prompt, "prompt_id": f"id-{abs(hash(prompt)) % 10**8}",
            "chosen": [user, {"content": chosen, "role": "assistant"}],
            "rejected": [user, {"content": rejected, "role": "assistant"}],
            "messages": [user, {"content": chosen, "role": "assistant"}],
            "score_chosen": score_chosen, "score_rejected": score_rejected}


UF_TRAIN = [
    _uf_row("Write a haiku about rain.", "Soft rain on the roof", "Rain.", 8.5, 3.0),
    _uf_row("Is 7 prime?", "Yes, 7 is prime.", "No.", 10.0, 1.0),
    _uf_row("Say hi.", "Hi!", "Hello!", 7.0, 7.0),  # equal scores: a tie
]
UF_TEST = [_uf_row("What is H2O?", "Water.", "Fire.", 9.0, 2.0)]


def _write_jsonl_gz(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("".join(json.dumps(row) + "\n" for row in rows))


def write_hh_rlhf(root: Path) -> Path:
    _write_jsonl_gz(root / "helpful-base" / "train.jsonl.gz", HH_TRAIN)
    _write_jsonl_gz(root / "helpful-base" / "test.jsonl.gz", HH_TEST)
    return root


def write_helpsteer3(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "README.md").write_text(HS3_README, encoding="utf-8")
    _write_jsonl_gz(root / "preference" / "train.jsonl.gz", HS3_TRAIN)
    _write_jsonl_gz(root / "preference" / "validation.jsonl.gz", HS3_VALIDATION)
    return root


def write_ultrafeedback(root: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    (root / "data").mkdir(parents=True, exist_ok=True)
    for split, rows in (("train_prefs", UF_TRAIN), ("test_prefs", UF_TEST), ("train_sft", UF_TRAIN[:1])):
        pq.write_table(pa.Table.from_pylist(rows), root / "data" / f"{split}-00000-of-00001.parquet")
    return root
