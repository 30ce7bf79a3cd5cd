"""Why a warm start fails: teacher-forced ranks of the tokens a demonstration trains.

Greedy EM says *that* a tiny policy cannot answer; these ranks say *where*. For each trained
position t of a tokenised demonstration (``assistant_masks[t] == 1``) the rank of the target is

    rank_t = #{v : logit_{t-1}(v) > logit_{t-1}(x_t)}        (0: the model's top choice)

computed from one forward pass (no sampling). Split by whether the target is a *name* token
(its text starts with an upper-case letter: TinyWorld's entities, never the tags), the ranks
separate "has not learned the format" from "cannot copy this world's names". Measured on the
tiny profile: the evaluation world's name tokens had median rank 1,264 while an auxiliary
world's had 0, which traced the failure to the SFT softmax suppressing names that are never a
target (``sft.lm_mix``).
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd
import torch


def target_ranks(model, example: dict[str, list[int]]) -> tuple[list[int], list[int]]:
    """``(positions, ranks)`` of the trained tokens of one tokenised demonstration."""
    ids = torch.tensor([example["input_ids"]], device=model.device)
    mask = torch.tensor(example["assistant_masks"][1:], dtype=torch.bool)
    with torch.no_grad():
        logits = model(ids).logits[0, :-1].float().cpu()  # logits[t] predicts token t + 1
    targets = ids[0, 1:].cpu()
    target_logits = logits.gather(1, targets[:, None])
    ranks = (logits > target_logits).sum(dim=1)
    positions = torch.nonzero(mask).flatten() + 1
    return positions.tolist(), ranks[mask].tolist()


def rank_table(
    model, tokenizer, examples: Iterable[dict[str, list[int]]], label: str = ""
) -> pd.DataFrame:
    """One row per trained token: ``label, example, position, token, is_name, rank``."""
    rows = []
    for index, example in enumerate(examples):
        positions, ranks = target_ranks(model, example)
        for position, rank in zip(positions, ranks):
            token = tokenizer.decode([example["input_ids"][position]])
            rows.append(
                {
                    "label": label,
                    "example": index,
                    "position": position,
                    "token": token,
                    "is_name": token.strip()[:1].isupper(),
                    "rank": rank,
                }
            )
    return pd.DataFrame(rows, columns=["label", "example", "position", "token", "is_name", "rank"])


def summarise_ranks(table: pd.DataFrame) -> pd.DataFrame:
    """Per label and token kind (name or other): count, top-1 share and median rank."""
    kind = table["is_name"].map({True: "name", False: "other"}).rename("kind")
    grouped = table.groupby([table["label"], kind])["rank"]
    return grouped.agg(
        tokens="size", top1=lambda r: float((r == 0).mean()), median_rank="median"
    ).reset_index()
