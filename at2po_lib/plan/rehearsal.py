"""Files for the ``rehearsal`` profile: the paper path at CPU size (configs/rehearsal.yaml).

The rehearsal keeps the paper profile's structure (the ``atpo`` template and tags, ``\\boxed{}``
answers, M=10 / L=2 / K=6 trees, dense retrieval through the HTTP server with faiss Flat,
8 updates per step, seq-mean-token-mean) and replaces what needs a GPU or a download by small
stand-ins made here, offline:

- ``corpus.jsonl``: the first passages of a wiki-18-format file (the repository's
  ``tests/fixtures/wiki18_sample.jsonl``: real Wikipedia passages in the real format);
- ``flashrag/nq/{train,test}.jsonl``: FlashRAG rows (the repository's 17 real NQ test rows,
  used as both splits: the rehearsal checks mechanics, not generalisation), read through
  ``data.local_dir`` as a downloaded FlashRAG folder would be;
- ``policy/``: a randomly initialised tiny Qwen3 and a byte-level BPE tokenizer trained on the
  corpus, the questions and the template (``save_pretrained``, loaded by path as
  ``Qwen/Qwen3-4B`` would be), given ``search_steps`` supervised steps on one target,
  ``<search> {question} </search>``: a purely random policy never writes a search call, and
  the rehearsal must reach the retrieval server. The policy stays near random otherwise (it
  answers nothing; the rehearsal checks mechanics, not learning).

    at2po rehearsal --out artifacts/rehearsal
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config.profile import ProfileConfig, load_profile
from ..policy.model import build_policy, save_policy
from ..policy.tokenizer import train_tokenizer
from ..protocol.prompts import build_messages, get_template, prompt_ids
from ..util.paths import repo_root

FIXTURES = Path("tests") / "fixtures"
DEFAULT_CORPUS = FIXTURES / "wiki18_sample.jsonl"
DEFAULT_QUESTIONS = FIXTURES / "flashrag_nq_test_sample.jsonl"


@dataclass(frozen=True)
class RehearsalFiles:
    root: Path

    @property
    def corpus(self) -> Path:
        return self.root / "corpus.jsonl"

    @property
    def flashrag(self) -> Path:
        return self.root / "flashrag"

    @property
    def policy(self) -> Path:
        return self.root / "policy"

    def overrides(self) -> list[str]:
        """``--set`` texts pointing the rehearsal profile at these files."""
        return [
            f"retrieval.corpus={self.corpus}",
            f"retrieval.index_dir={self.root / 'index'}",
            f"policy.model={self.policy}",
            f"data.local_dir={self.flashrag}",
        ]


def _read_jsonl(path: Path, limit: int | None = None) -> list[dict]:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: rehearsal input missing")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows[:limit] if limit else rows


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def prepare(
    out: Path,
    profile_cfg: ProfileConfig | None = None,
    passages: int = 200,
    corpus_src: Path | None = None,
    questions_src: Path | None = None,
    seed: int = 0,
    search_steps: int = 25,
) -> RehearsalFiles:
    """Write the corpus, the FlashRAG folder and the random policy under ``out``."""
    cfg = profile_cfg or load_profile("rehearsal")
    files = RehearsalFiles(Path(out))
    corpus = _read_jsonl(corpus_src or repo_root() / DEFAULT_CORPUS, passages)
    questions = _read_jsonl(questions_src or repo_root() / DEFAULT_QUESTIONS)
    _write_jsonl(files.corpus, corpus)
    for split in ("train", "test"):
        _write_jsonl(files.flashrag / "nq" / f"{split}.jsonl", questions)
    template = get_template(cfg.policy.template)
    texts = [r["contents"] for r in corpus] + [r["question"] for r in questions]
    texts += [template.system or "", template.invalid_action_message, template.tool_limit_notice]
    tokenizer = train_tokenizer(texts, vocab_size=cfg.policy.vocab_size)
    model = build_policy(cfg.policy, tokenizer, seed=seed)
    if search_steps > 0:
        # 6 questions x 25 steps at lr 2e-2: ~3 of 10 sampled first turns close a search
        # within 16 tokens (measured; the rehearsal's calls may run to 64), in seconds
        prime_search_calls(
            model,
            tokenizer,
            template,
            [r["question"] for r in questions[:6]],
            search_steps,
            learning_rate=2e-2,
        )
    save_policy(model, tokenizer, files.policy)
    return files


def prime_search_calls(
    model, tokenizer, template, questions: list[str], steps: int, learning_rate: float = 1e-2
) -> list[float]:
    """``steps`` AdamW steps of next-token loss on ``prompt -> <search> question </search>``
    (loss on the completion only, all questions in one batch); returns the losses."""
    rows = []
    for question in questions:
        prompt = prompt_ids(tokenizer, build_messages(template, question))
        target = tokenizer.encode(f"<search> {question} </search>", add_special_tokens=False)
        rows.append((prompt, target))
    width = max(len(p) + len(t) for p, t in rows)
    pad = tokenizer.pad_token_id
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (prompt, target) in enumerate(rows):
        seq = prompt + target
        ids[i, : len(seq)] = torch.tensor(seq)
        labels[i, len(prompt) : len(seq)] = torch.tensor(target)
        mask[i, : len(seq)] = 1
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    model.train()
    losses = []
    for _ in range(steps):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses
