"""Shared-prefix forward passes: a token prefix common to several traces runs through the model once.

GRPO samples a group from one prompt, and the prompts of a batch often open with the same system
prompt and few-shot examples, so most of a batch's tokens are repeated prefixes that are never
trained. `build_tree` arranges a micro-batch as a tree: each node runs its segment once (batch 1,
with grad) on top of its parent's KV cache, and the traces attached to a node ("leaves") run only
their own suffix, right-padded, on that cache expanded to their number. Autograd sums the leaves'
gradients into the single prefix computation through the expand, so the loss, the logprobs and
the gradients are those of the unshared pass up to float rounding.

A trace's prefix stops one token before its first trained token: the hidden state that predicts
a trained token is then always computed in the leaf pass, and the prefix needs no logits at all.
Only plain full-attention `DynamicLayer` caches are supported (sliding windows drop old keys).
With dropout on (lora_dropout > 0) the traces of a prefix share its dropout mask: the gradient is
still unbiased, but it is no longer the unshared pass's sample.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PrefixNode:
    """Tokens `[start, end)` of its traces, computed once on top of the parent's cache of `[0, start)`."""

    start: int
    tokens: tuple[int, ...]
    children: tuple["PrefixNode", ...]
    leaves: tuple[int, ...]
    """Indices of the traces whose suffix (`token_ids[end:]`) runs on this node's cache."""

    @property
    def end(self) -> int:
        return self.start + len(self.tokens)


def shareable_length(token_ids: Sequence[int], prompt_length: int, loss_mask: Sequence[int]) -> int:
    """How many leading tokens may sit in a shared prefix: all before the one predicting the first trained token."""
    first = next((column for column, trained in enumerate(loss_mask) if trained), None)
    return len(token_ids) - 1 if first is None else max(prompt_length + first - 1, 0)


def build_tree(sequences: Sequence[Sequence[int]], limits: Sequence[int], *, min_tokens: int) -> PrefixNode:
    """The prefix tree of `sequences`, sharing at most `limits[i]` leading tokens of sequence i.

    A node is made for two or more sequences that share at least `min_tokens` tokens beyond the
    parent's cache; shorter common runs are not worth a forward call of their own, so they stay
    in the deeper nodes' segments or the leaves' suffixes.
    """
    if min_tokens < 1:
        raise ValueError(f"min_tokens={min_tokens} must be >= 1")

    def split(indices: list[int], cache_end: int, depth: int) -> tuple[list[PrefixNode], list[int]]:
        children: list[PrefixNode] = []
        leaves: list[int] = []
        by_token: dict[int, list[int]] = {}
        for index in indices:
            if limits[index] <= depth:
                leaves.append(index)
            else:
                by_token.setdefault(sequences[index][depth], []).append(index)
        for members in by_token.values():
            if len(members) == 1:
                leaves.extend(members)
                continue
            end = _common_length(sequences, members, depth, min(limits[m] for m in members))
            if end - cache_end >= min_tokens:
                sub_children, sub_leaves = split(members, end, end)
                tokens = tuple(sequences[members[0]][cache_end:end])
                children.append(PrefixNode(cache_end, tokens, tuple(sub_children), tuple(sorted(sub_leaves))))
            else:
                sub_children, sub_leaves = split(members, cache_end, end)
                children.extend(sub_children)
                leaves.extend(sub_leaves)
        return children, leaves

    children, leaves = split(list(range(len(sequences))), 0, 0)
    return PrefixNode(0, (), tuple(children), tuple(sorted(leaves)))


def _common_length(sequences: Sequence[Sequence[int]], members: list[int], depth: int, limit: int) -> int:
    first = sequences[members[0]]
    end = depth
    while end < limit and all(sequences[m][end] == first[end] for m in members[1:]):
        end += 1
    return end


def tree_tokens(node: PrefixNode, lengths: Sequence[int]) -> int:
    """Padded tokens the tree's forward passes cost: each segment once, each leaf batch rows x widest suffix."""
    widest = max((lengths[index] - node.end for index in node.leaves), default=0)
    return len(node.tokens) + len(node.leaves) * widest + sum(tree_tokens(child, lengths) for child in node.children)


def supports_sharing(model: Any, decoder: Any) -> bool:
    """True when the decoder takes a KV cache and explicit positions, and keeps every key (no sliding window)."""
    parameters = inspect.signature(decoder.forward).parameters
    if "position_ids" not in parameters or not ({"cache", "past_key_values"} & set(parameters)):
        return False
    config = model.config
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        return all(kind == "full_attention" for kind in layer_types)
    return getattr(config, "sliding_window", None) is None or getattr(config, "use_sliding_window", True) is False


def trained_hidden_states(
    decoder: Any,
    tree: PrefixNode,
    sequences: Sequence[Sequence[int]],
    positions: Sequence[Sequence[int]],
    *,
    device: Any,
) -> Any:
    """[sum of len(positions[i]), hidden] last hidden states at `positions[i]` of each sequence, in order.

    `positions[i]` are absolute positions in sequence i, each at or after its leaf's node end.
    """
    import torch

    cache_arg = "cache" if "cache" in inspect.signature(decoder.forward).parameters else "past_key_values"
    found: dict[int, Any] = {}

    def visit(node: PrefixNode, parent: list[tuple[Any, Any]] | None) -> None:
        tensors = parent
        if node.tokens:
            cache = _cache(parent, rows=1)
            decoder(
                input_ids=torch.tensor([node.tokens], device=device),
                position_ids=torch.arange(node.start, node.end, device=device).unsqueeze(0),
                use_cache=True,
                **{cache_arg: cache},
            )
            tensors = _layer_tensors(cache, node.end)
        if node.leaves:
            run_leaves(node, tensors)
        for child in node.children:
            visit(child, tensors)

    def run_leaves(node: PrefixNode, tensors: list[tuple[Any, Any]] | None) -> None:
        depth = node.end
        suffixes = [sequences[index][depth:] for index in node.leaves]
        width = max(len(suffix) for suffix in suffixes)
        rows = len(suffixes)
        input_ids = torch.zeros((rows, width), dtype=torch.long, device="cpu")  # moved below
        attention_mask = torch.zeros((rows, depth + width), dtype=torch.long, device="cpu")
        attention_mask[:, :depth] = 1
        for row, suffix in enumerate(suffixes):
            input_ids[row, : len(suffix)] = torch.tensor(suffix, device="cpu")
            attention_mask[row, depth : depth + len(suffix)] = 1
        cache = _cache(tensors, rows=rows) if tensors is not None else None
        hidden = decoder(
            input_ids=input_ids.to(device),
            attention_mask=attention_mask.to(device),
            position_ids=(depth + torch.arange(width, device=device)).unsqueeze(0).expand(rows, width),
            use_cache=cache is not None,
            **({cache_arg: cache} if cache is not None else {}),
        ).last_hidden_state
        for row, index in enumerate(node.leaves):
            columns = torch.tensor([p - depth for p in positions[index]], dtype=torch.long, device=device)
            found[index] = hidden[row].index_select(0, columns)

    visit(tree, None)
    return torch.cat([found[index] for index in range(len(sequences))], dim=0)


def _cache(tensors: list[tuple[Any, Any]] | None, *, rows: int) -> Any:
    """A DynamicCache over `tensors` (batch 1) seen as `rows` rows; expand, so gradients sum into them."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    cache = DynamicCache()
    for keys, values in tensors or ():
        layer = DynamicLayer()
        layer.lazy_initialization(keys, values)
        shape = (rows, *keys.shape[1:])
        layer.keys, layer.values = keys.expand(shape), values.expand(shape)
        cache.layers.append(layer)
    return cache


def _layer_tensors(cache: Any, length: int) -> list[tuple[Any, Any]]:
    from transformers.cache_utils import DynamicLayer

    if cache.get_seq_length() != length:
        raise RuntimeError(
            f"the prefix pass left {cache.get_seq_length()} cached tokens instead of {length} (is "
            "gradient checkpointing turning use_cache off?); set trainer.share_prefix=false"
        )
    tensors = []
    for index, layer in enumerate(cache.layers):
        if type(layer) is not DynamicLayer:
            raise TypeError(
                f"cache layer {index} is a {type(layer).__name__}; shared-prefix training needs plain "
                "full-attention DynamicLayer caches; set trainer.share_prefix=false for this model"
            )
        tensors.append((layer.keys, layer.values))
    return tensors
