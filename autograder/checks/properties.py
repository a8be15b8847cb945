"""Properties every correct answer has, used to explain a wrong one.

Each function takes a probe and the outputs the student's code returned, and returns a hint
in a student's words when the property is broken (None when it holds). They need no
reference, so they work in the notebook as well as in the grader.
"""

import torch


def _argument(probe, name, position):
    if name in probe.get("kwargs", {}):
        return probe["kwargs"][name]
    args = probe.get("args", ())
    return args[position] if len(args) > position else None


def _weights(outputs, index=1):
    weights = outputs[index] if len(outputs) > index else None
    return weights if isinstance(weights, torch.Tensor) and weights.is_floating_point() else None


def _dropout_rate(probe):
    """The dropout a probe's module is built with (given by keyword), and 0 in eval mode, where it is off."""
    rate = ((probe.get("construct") or {}).get("kwargs") or {}).get("dropout", 0.0)
    return rate if probe.get("training") else 0.0


def weights_sum_to_one(index=1):
    def check(probe, outputs):
        weights = _weights(outputs, index)
        if weights is None or weights.dim() < 1 or _dropout_rate(probe):  # dropped weights don't sum to 1
            return None
        sums = weights.double().sum(-1)
        if torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
            return None
        if (weights < 0).any():
            return ("the weights returned have negative entries, so they are not the softmax's probabilities: return "
                    "the weights after the softmax, softmax(scores), not the scores")
        if weights.dim() >= 2 and torch.allclose(weights.double().sum(-2), torch.ones_like(weights.double().sum(-2)), atol=1e-4):
            return "the weights sum to 1 over the queries, not the keys: take the softmax over the last axis (dim=-1)"
        return "the weights don't sum to 1 over the last axis: is the softmax taken over the keys (dim=-1)?"

    return check


def weights_follow_the_scores(index=1):
    """Every query giving every key the same weight 1/S means the scores never reached the softmax."""

    def check(probe, outputs):
        weights = _weights(outputs, index)
        if weights is None or weights.dim() < 2 or weights.size(-1) < 2 or weights.numel() == 0:
            return None
        weights = weights.double()
        if torch.allclose(weights, torch.full_like(weights, 1 / weights.size(-1)), rtol=0, atol=1e-6):
            return ("every key gets the same weight 1/S for every query, so the weights ignore the scores: "
                    "take the softmax of the scores q @ k^T / sqrt(d_k), not of a constant")
        return None

    return check


def blocked_keys_get_zero_weight(mask_name, mask_position, index=1):
    def check(probe, outputs):
        weights, mask = _weights(outputs, index), _argument(probe, mask_name, mask_position)
        if weights is None or mask is None or mask.dtype != torch.bool:
            return None
        try:
            blocked = mask.expand_as(weights)
        except RuntimeError:
            return None
        if (weights[blocked].abs() > 1e-6).any():
            if (weights[~blocked].abs() < 1e-6).all():
                return (
                    "the mask works the wrong way round: in this course (and in nn.MultiheadAttention) True means "
                    "BLOCKED, so fill the scores with float('-inf') where the mask is True"
                )
            return "keys the mask blocks (True) still get weight: fill their scores with float('-inf') before the softmax"
        return None

    return check


def attention_dropout_as_in_pytorch(index=1):
    """Dropout on the attention weights: off in eval mode whatever the rate; in training mode with
    dropout=1.0 every weight is dropped, so the weights returned are all zero."""

    def check(probe, outputs):
        weights = _weights(outputs, index)
        rate = ((probe.get("construct") or {}).get("kwargs") or {}).get("dropout", 0.0)
        if weights is None or not rate:
            return None
        if not probe.get("training"):
            sums = weights.double().sum(-1)
            if not torch.allclose(sums, torch.ones_like(sums), atol=1e-4) and (weights == 0).any():
                return ("dropout is on in eval() mode: F.dropout drops whatever the module's mode unless you pass "
                        "training=self.training (or call it only when self.training)")
            return None
        if rate == 1.0 and (weights != 0).any():
            return ("with dropout=1.0 in training mode every attention weight is dropped, so the weights returned are "
                    "all zero: dropout acts on the weights after the softmax (F.dropout(weights, self.dropout, "
                    "training=self.training)), then out = weights @ v")
        return None

    return check


def _fitted_scale(scores, weights, added=None):
    """The factor c with weights = softmax(c * scores + added) over the last axis, read back from the weights
    (None when no single factor explains them: another mistake)."""
    log = weights.double().log()
    if added is not None:
        log = log - added.double()
    valid = (weights > 1e-9) & log.isfinite()
    if (valid.sum(-1) >= 2).sum() == 0:
        return None
    count = valid.sum(-1, keepdim=True).clamp(min=1)

    def centred(t):  # each row minus its mean over the keys that got weight
        t = torch.where(valid, t, torch.zeros_like(t))
        return torch.where(valid, t - t.sum(-1, keepdim=True) / count, torch.zeros_like(t))

    log, scores = centred(log), centred(scores.double())
    spread = float((scores * scores).sum())
    if spread < 1e-12:
        return None
    c = float((log * scores).sum()) / spread
    return c if float((log - c * scores).abs().max()) <= 1e-3 * max(1.0, float(log.abs().max())) else None


def _scale_hint(c, sizes):
    """Name the scale ``c`` the scores got, given {what: size} of the call; the right one is 1/sqrt(sizes["d_k"])."""
    d_k = sizes["d_k"]
    right = d_k**-0.5
    if abs(c - right) <= 1e-3 * right:
        return None
    named = {"1 (no scale at all)": 1.0,
             f"1/d_k = 1/{d_k}: divided by d_k rather than its square root, or by sqrt(d_k) twice": 1 / d_k}
    for what, size in sizes.items():
        if what != "d_k" and size != d_k:
            named[f"1/sqrt({size}), the square root of {what}"] = size**-0.5
    found = next((name for name, value in named.items() if abs(c - value) <= 1e-3 * value), None)
    said = f"{c:.4g}, that is {found}" if found else f"{c:.4g}"
    return (f"the scores are scaled by {said}; the scale is 1/sqrt(d_k) = 1/sqrt({d_k}) = {right:.4g}, with d_k the "
            "size of each query and key (query.size(-1))")


def attention_scale(index=1):
    """scaled_dot_product_attention's scores are q @ k^T / sqrt(d_k): the factor the weights show names a wrong one."""

    def check(probe, outputs):
        weights, q, k = _weights(outputs, index), _argument(probe, "query", 0), _argument(probe, "key", 1)
        mask = _argument(probe, "attn_mask", 3)
        if weights is None or not isinstance(q, torch.Tensor) or not isinstance(k, torch.Tensor):
            return None
        scores = q.double() @ k.double().transpose(-2, -1)  # (..., L, S)
        if scores.shape != weights.shape:
            return None
        added = mask if isinstance(mask, torch.Tensor) and mask.is_floating_point() else None
        c = _fitted_scale(scores, weights, None if added is None else added.expand_as(scores))
        if c is None:
            return None
        sizes = {"d_k": q.size(-1), "the number of keys (S)": k.size(-2), "the number of queries (L)": q.size(-2)}
        value = _argument(probe, "value", 2)
        if isinstance(value, torch.Tensor):
            sizes["the values' size"] = value.size(-1)
        return _scale_hint(c, sizes)

    return check


def _projected(probe, name, x):
    """x through the probe's layer ``name`` (its weight and bias in the probe's state_dict), in float64."""
    state = (probe.get("construct") or {}).get("state_dict") or {}
    weight, bias = state.get(f"{name}.weight"), state.get(f"{name}.bias")
    if weight is None:
        return None
    out = x.double() @ weight.double().T
    return out if bias is None else out + bias.double()


def projected_attention_scale(heads=False, index=1):
    """The same for a module: the scores are q_proj(query) @ k_proj(key)^T per head, read from the probe's weights."""

    def check(probe, outputs):
        weights = _weights(outputs, index)
        args = probe.get("args") or []
        if weights is None or probe.get("training") or not args or not isinstance(args[0], torch.Tensor):
            return None
        query = args[0]
        key = args[1] if heads and len(args) > 1 and isinstance(args[1], torch.Tensor) else query
        kwargs = probe.get("kwargs") or {}
        if any(isinstance(m, torch.Tensor) and m.is_floating_point() for m in kwargs.values()):
            return None  # a float mask changes the scores by more than a factor
        q, k = _projected(probe, "q_proj", query), _projected(probe, "k_proj", key)
        if q is None or k is None:
            return None
        H = weights.size(1) if heads and weights.dim() == 4 else 1
        if heads:
            if weights.dim() != 4:
                return None
            B, L, C = q.shape
            q = q.reshape(B, L, H, C // H).transpose(1, 2)  # (B, H, L, D)
            k = k.reshape(B, k.size(1), H, C // H).transpose(1, 2)  # (B, H, S, D)
        scores = q @ k.transpose(-2, -1)  # (B, [H,] L, S)
        if scores.shape != weights.shape:
            return None
        c = _fitted_scale(scores, weights)
        if c is None:
            return None
        sizes = {"d_k": q.size(-1), "the number of tokens (T)": k.size(-2)}
        if heads:
            sizes["d_model, all heads together"] = q.size(-1) * H
        return _scale_hint(c, sizes)

    return check


def rearranges_input(hint):
    """split_heads and merge_heads only move values: if they are all there, they are in the wrong places."""

    def check(probe, outputs):
        x, out = _argument(probe, "x", 0), (outputs[0] if outputs else None)
        if not isinstance(x, torch.Tensor) or not isinstance(out, torch.Tensor) or out.dtype != x.dtype:
            return None
        if out.numel() != x.numel():
            return None
        if torch.equal(out.flatten().sort().values, x.flatten().sort().values):
            return hint
        return "the result should hold exactly the values of x, only rearranged (reshape and transpose, no arithmetic)"

    return check


def padded_keys_get_zero_weight(mask_name, mask_position, index=1):
    """A (B, S) key padding mask blocks key s of example b for every query (and head)."""

    def check(probe, outputs):
        weights, mask = _weights(outputs, index), _argument(probe, mask_name, mask_position)
        if weights is None or mask is None or mask.dtype != torch.bool or mask.dim() != 2 or weights.dim() < 3:
            return None
        padded = mask.reshape(mask.size(0), *[1] * (weights.dim() - 2), mask.size(1))  # (B, 1, ..., S)
        try:
            padded = padded.expand_as(weights)
        except RuntimeError:
            return None
        if (weights[padded].abs() > 1e-6).any():
            if (weights[~padded].abs() < 1e-6).all():
                return f"{mask_name} works the wrong way round: True marks PADDING, the keys to block"
            return (
                f"padded keys (True in {mask_name}) still get weight: block them for every query (and head), "
                "as a (B, 1, 1, S) mask"
            )
        return None

    return check


def _encoding_table(outputs):
    pe = outputs[0] if outputs else None
    if not isinstance(pe, torch.Tensor) or not pe.is_floating_point() or pe.dim() != 2 or pe.size(-1) % 2:
        return None
    return pe.double()


def sin_cos_pairs():
    """Columns 2i and 2i+1 of a sinusoidal encoding are the sine and cosine of one angle."""

    def check(probe, outputs):
        pe = _encoding_table(outputs)
        if pe is None:
            return None
        norms = pe[:, 0::2] ** 2 + pe[:, 1::2] ** 2  # sin^2 + cos^2
        if torch.allclose(norms, torch.ones_like(norms), atol=1e-3):
            return None
        return (
            "columns 2i and 2i+1 should hold the sine and the cosine of the same angle, pos / 10000^(2i/d_model): "
            "sin in the even columns (pe[:, 0::2]), cos in the odd ones (pe[:, 1::2])"
        )

    return check


def starts_at_position_zero():
    """Row 0 of a sinusoidal encoding is sin(0), cos(0), ... = 0, 1, 0, 1, ..."""

    def check(probe, outputs):
        pe = _encoding_table(outputs)
        if pe is None or pe.size(0) == 0:
            return None
        zero = torch.zeros_like(pe[0])
        zero[1::2] = 1.0  # sin 0, cos 0, sin 0, ...
        if torch.allclose(pe[0], zero, atol=1e-6):
            return None
        if torch.allclose(pe[0], 1 - zero, atol=1e-6):
            return "sin and cos are swapped: sin goes in the even columns (2i), cos in the odd ones (2i+1)"
        return "position 0 should encode as sin(0), cos(0), ... = [0, 1, 0, 1, ...]: do the positions start at 0?"

    return check


def adds_table_rows(key, hint):
    """forward(x) returns x + table[:T], the table being a buffer or weight of the probe's state_dict."""

    def check(probe, outputs):
        x, out = _argument(probe, "x", 0), (outputs[0] if outputs else None)
        table = ((probe.get("construct") or {}).get("state_dict") or {}).get(key)
        if not all(isinstance(t, torch.Tensor) for t in (x, out, table)) or x.dim() != 3 or out.shape != x.shape:
            return None
        if x.size(1) > table.size(0) or table.dim() != 2 or table.size(1) != x.size(2):
            return None
        expected = x.double() + table[: x.size(1)].double()  # (B, T, C)
        return None if torch.allclose(out.double(), expected, rtol=1e-4, atol=1e-5) else hint

    return check


def dropout_off_in_eval(key):
    """In eval mode dropout does nothing: zeros among x + table[:T], the rest scaled by 1/(1-p), mean it dropped."""

    def check(probe, outputs):
        x, out = _argument(probe, "x", 0), (outputs[0] if outputs else None)
        construct = probe.get("construct") or {}
        table, p = (construct.get("state_dict") or {}).get(key), (construct.get("kwargs") or {}).get("dropout", 0)
        if probe.get("training") or not p or not all(isinstance(t, torch.Tensor) for t in (x, out, table)):
            return None
        if x.dim() != 3 or out.shape != x.shape or x.size(1) > table.size(0) or table.shape[1:] != x.shape[2:]:
            return None
        kept = (x.double() + table[: x.size(1)].double()) / (1 - p)  # (B, T, C): what survives a dropout
        dropped = out == 0
        if dropped.any() and torch.allclose(out.double()[~dropped], kept[~dropped], rtol=1e-4, atol=1e-5):
            return ("dropout is applied in eval mode: use the module's self.dropout (an nn.Dropout is off after "
                    "model.eval()), or pass training=self.training to F.dropout")
        return None

    return check


def scales_embedding(key="embedding.weight"):
    """Each token's vector is its row of the embedding table times sqrt(d_model)."""

    def check(probe, outputs):
        tokens, out = _argument(probe, "tokens", 0), (outputs[0] if outputs else None)
        weight = ((probe.get("construct") or {}).get("state_dict") or {}).get(key)
        if not all(isinstance(t, torch.Tensor) for t in (tokens, out, weight)) or tokens.is_floating_point():
            return None
        if weight.dim() != 2 or out.shape != (*tokens.shape, weight.size(1)):
            return None
        rows = weight.double()[tokens]  # (B, T, C)
        scale = float((out.double() * rows).sum() / (rows * rows).sum())  # the best single factor
        root = weight.size(1) ** 0.5
        if not torch.allclose(out.double(), scale * rows, rtol=1e-4, atol=1e-5):
            return "each token's vector should be its row of self.embedding.weight, times math.sqrt(d_model)"
        if abs(scale - root) <= 1e-4 * root:
            return None
        return f"the embeddings are multiplied by {scale:.4g}; the paper multiplies them by sqrt(d_model) = {root:.4g}"

    return check


def is_rotation():
    """The relative-position matrix turns each (sin, cos) pair: orthogonal, and the identity for k = 0."""

    def check(probe, outputs):
        M, k = (outputs[0] if outputs else None), _argument(probe, "k", 0)
        if not isinstance(M, torch.Tensor) or not M.is_floating_point() or M.dim() != 2 or M.size(0) != M.size(1):
            return None
        eye = torch.eye(M.size(0), dtype=torch.float64)
        if k == 0 and not torch.allclose(M.double(), eye, atol=1e-5):
            return "for k = 0, M must be the identity: PE[pos] @ M = PE[pos]"
        if not torch.allclose(M.double() @ M.double().T, eye, atol=1e-4):
            return (
                "M should be a rotation (M @ M.T = I): on its diagonal, one 2x2 block [[cos, -sin], [sin, cos]] per "
                "(sin, cos) pair, turning it by the angle k * omega_i"
            )
        return None

    return check


def boolean_mask(how):
    """A mask is boolean, True where attention is blocked; ``how`` says how to make one."""

    def check(probe, outputs):
        mask = outputs[0] if outputs else None
        if not isinstance(mask, torch.Tensor) or mask.dtype == torch.bool:
            return None
        return f"the mask holds {str(mask.dtype).replace('torch.', '')} values; return a boolean mask: {how}"

    return check


def future_stays_hidden(hint):
    """A probe's ``same_prefix`` rows differ only from position ``length`` on: their outputs before it must agree."""

    def check(probe, outputs):
        same, out = probe.get("same_prefix"), (outputs[0] if outputs else None)
        if same is None or not isinstance(out, torch.Tensor) or not out.is_floating_point() or out.dim() < 2:
            return None
        (a, b), k = same["rows"], same["length"]
        if max(a, b) >= out.size(0) or out.size(1) < k:
            return None
        if torch.allclose(out[a, :k].double(), out[b, :k].double(), rtol=1e-4, atol=1e-5, equal_nan=True):
            return None
        return hint

    return check


def lm_windows():
    """make_lm_examples: x's rows are windows of ids that start block_size apart, y's the same one position on.

    The probes' ids are distinct, so where each row starts in ids shows the stride, the count and the shift,
    whatever the shapes returned (this property also explains a wrong shape)."""

    def check(probe, outputs):
        ids, block_size = _argument(probe, "ids", 0), _argument(probe, "block_size", 1)
        if len(outputs) != 2 or not all(isinstance(t, torch.Tensor) for t in (ids, *outputs)):
            return None
        x, y = outputs
        n = (ids.size(0) - 1) // block_size
        if x.dtype != ids.dtype or y.dtype != ids.dtype:
            dtypes = " and ".join(sorted({str(t.dtype).replace("torch.", "") for t in (x, y)}))
            return (f"x and y are {dtypes}: they hold token ids, so keep the dtype of ids (long): slice and reshape "
                    "ids, or make new tensors with dtype=ids.dtype (torch.zeros makes float32)")
        if x.dim() != 2 or y.dim() != 2:
            return f"x and y are each (n, block_size) = ({n}, {block_size}): one window per row"
        if x.shape == (block_size, n) != (n, block_size):
            return (f"x and y are (block_size, n) = {tuple(x.shape)}: each row is one window, so they are "
                    f"(n, block_size) = ({n}, {block_size}), ids[: n * block_size].reshape(n, block_size)")
        where = {int(token): i for i, token in enumerate(ids.tolist())}
        starts = [where.get(int(row[0])) for row in x] if x.size(1) else []
        if len(starts) >= 2 and None not in starts:
            stride = starts[1] - starts[0]
            if stride < block_size:
                return (f"the windows overlap (they start {stride} token{'s' * (stride != 1)} apart): they start "
                        "block_size apart and do not overlap, x[i] = ids[i*bs:(i+1)*bs], n = (N - 1) // block_size "
                        "of them")
            if stride > block_size:
                return (f"the windows start {stride} tokens apart, so tokens are skipped: they start block_size apart, "
                        "x[i] = ids[i*bs:(i+1)*bs], and y[i] is the same window one position on, "
                        "ids[i*bs+1:(i+1)*bs+1]")
        if y.shape == x.shape and y.numel():
            y_starts = [where.get(int(row[0])) for row in y]
            if None in y_starts or None in starts:
                if torch.equal(y, x + 1):
                    return ("y is x's ids plus one: the targets are the next tokens of the text, ids shifted by one "
                            "position, y[i] = ids[i*bs+1:(i+1)*bs+1]")
                return "x and y must hold tokens of ids: slices of it, y[i] = ids[i*bs+1:(i+1)*bs+1]"
            shift = y_starts[0] - starts[0]
            if shift != 1:
                return (f"y is shifted by {shift} positions from x: the targets are the next tokens, one position on, "
                        "y[i] = ids[i*bs+1:(i+1)*bs+1]")
        return None

    return check


def _tempered_logits(probe):
    logits = _argument(probe, "logits", 0)
    temperature = _argument(probe, "temperature", 1)
    if not isinstance(logits, torch.Tensor):
        return None
    return logits.double() / (1.0 if temperature is None else float(temperature))


def sampling_distribution():
    """next_token_probs: each row a distribution over the vocabulary (sums to 1), whose kept tokens are the most
    probable ones in the row (a dropped token never outranks a kept one)."""

    def check(probe, outputs):
        probs, logits = (outputs[0] if outputs else None), _tempered_logits(probe)
        if not isinstance(probs, torch.Tensor) or logits is None or probs.shape != logits.shape or probs.dim() != 2:
            return None
        probs = probs.double()
        kept = (probs > 0) & ~probs.isnan()  # (B, V)
        for row_logits, row_kept in zip(logits, kept):
            if row_kept.any() and (~row_kept).any() and row_logits[~row_kept].max() > row_logits[row_kept].min():
                return SORT_UNDONE
        sums = probs.nan_to_num(0.0).sum(dim=-1)  # (B,)
        if not kept.any(dim=-1).all():
            return ("a row keeps no token, so its probabilities are 0/0 = NaN: top_k=0 (like None) means no top-k "
                    "filter, and top-p always keeps the most probable token and the one that crosses top_p")
        if not torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
            columns = probs.sum(dim=0)
            if probs.size(0) > 1 and torch.allclose(columns, torch.ones_like(columns), atol=1e-4):
                return ("the probabilities sum to 1 over the batch (dim 0), not over each row's vocabulary: take "
                        "the softmax (and any sum) over the last axis, dim=-1")
            return ("the rows don't sum to 1: renormalise each row by its own sum, probs / probs.sum(dim=-1, "
                    "keepdim=True)")
        return None

    return check


SORT_UNDONE = ("the tokens kept are not the most probable ones: the decision made on the sorted probabilities is "
               "not put back in vocabulary order. Scatter it with the sort's indices, torch.zeros_like(drop_sorted)"
               ".scatter(-1, order, drop_sorted) (gather with them does the opposite: it sorts)")


def returns_logits():
    """A language model's forward returns logits: neither probabilities nor log-probabilities, and no NaN."""

    def check(probe, outputs):
        logits = outputs[0] if outputs else None
        if not isinstance(logits, torch.Tensor) or not logits.is_floating_point() or logits.dim() != 3:
            return None
        if logits.isnan().any():
            return ("some logits are NaN: a position whose attention row is blocked entirely gets NaN. Does the mask "
                    "block the diagonal, a position's own token? causal_mask(T) blocks only the later positions "
                    "(j > i)")
        totals = {"probabilities": logits.double().sum(-1), "log-probabilities": logits.double().exp().sum(-1)}
        for what, total in totals.items():
            if torch.allclose(total, torch.ones_like(total), atol=1e-4):
                return (f"forward returns {what}: it returns the logits, self.lm_head(x), with no softmax (and no "
                        "log_softmax): the loss, F.cross_entropy, applies it")
        return None

    return check


PROPERTIES = {
    # The most specific property first: a mask read the wrong way round can also leave rows that
    # don't sum to 1 (those it blocks entirely), which is not a softmax over the wrong axis.
    "scaled_dot_product_attention": (blocked_keys_get_zero_weight("attn_mask", 3), weights_follow_the_scores(),
                                     weights_sum_to_one(), attention_scale()),
    "SelfAttention": (blocked_keys_get_zero_weight("attn_mask", 1), weights_follow_the_scores(), weights_sum_to_one(),
                      projected_attention_scale()),
    "split_heads": (rearranges_input(
        "the result holds the right values in the wrong places: head h of token t should be "
        "x[b, t, h*D:(h+1)*D], so reshape to (B, T, H, D), then transpose(1, 2)"),),
    "merge_heads": (rearranges_input(
        "the result holds the right values in the wrong places: out[b, t, h*D:(h+1)*D] should be x[b, h, t], so "
        "transpose(1, 2) back to (B, T, H, D), then reshape to (B, T, H*D)"),),
    "MultiHeadAttention": (attention_dropout_as_in_pytorch(), weights_sum_to_one(), weights_follow_the_scores(),
                           blocked_keys_get_zero_weight("attn_mask", 4),
                           padded_keys_get_zero_weight("key_padding_mask", 3), projected_attention_scale(heads=True)),
    "sinusoidal_positional_encoding": (sin_cos_pairs(), starts_at_position_zero()),
    "PositionalEncoding": (dropout_off_in_eval("pe"), adds_table_rows(
        "pe", "forward should return x + self.pe[:T]: row t of the buffer added to token t of every example"),),
    "LearnedPositionalEmbedding": (adds_table_rows(
        "embedding.weight", "forward should return x + self.embedding(positions), positions = 0, 1, ..., T-1, the "
        "same for every example"),),
    "TokenEmbedding": (scales_embedding(),),
    "relative_position_matrix": (is_rotation(),),
    "causal_mask": (boolean_mask("create it with dtype=torch.bool, True above the diagonal"),),
    "padding_mask": (boolean_mask("a comparison such as tokens == pad_id already gives one, True at padding"),),
    "DecoderLayer": (future_stays_hidden(
        "earlier positions change when only later target tokens change, so the decoder sees the future: pass "
        "tgt_mask (the causal mask) to self-attention as its attn_mask"),),
    "Decoder": (future_stays_hidden(
        "earlier positions change when only later target tokens change, so the decoder sees the future: pass "
        "tgt_mask on to every layer"),),
    "make_lm_examples": (lm_windows(),),
    "DecoderOnlyLM": (returns_logits(),),
    "next_token_probs": (sampling_distribution(),),
    "Transformer": (future_stays_hidden(
        "earlier positions change when only later target tokens change, so the decoder sees the future: decode "
        "must build causal_mask(T, device=tgt.device) itself and pass it as tgt_mask"),),
}

# Properties that also explain outputs of the wrong shape (the others are asked only when the shapes are right).
WRONG_SHAPE_PROPERTIES = {
    "make_lm_examples": (lm_windows(),),
}

# What a difference in a fixture's recorded state means (e.g. the model given to greedy_decode).
FIXTURE_HINTS = {
    "training": "leaves the model in a different mode than it found it: remember model.training and restore it",
    "grad_enabled": "decodes with gradients enabled: wrap the loop in torch.no_grad()",
    "encode": "calls model.encode a different number of times: encode the source once, before the loop",
    "decode": "calls model.decode a different number of times: once per new token, and no more once every row has "
              "produced eos_id",
    "decoded_in_training_mode": "decodes with the model in training mode (dropout on): call model.eval() first, "
                                "then restore the mode the model was in",
    "src_key_padding_mask": "src_key_padding_mask is not passed on to model.encode as given (masks are never inferred)",
    "memory_key_padding_mask": "model.decode should get src_key_padding_mask as its memory_key_padding_mask, so that "
                               "the decoder doesn't attend to the source's padding (and masks are never inferred)",
    "lm_calls": "calls the model differently than the lesson says: with use_cache, run the prompt once, "
                "model.forward_cached(prompt, cache) with cache = [None] * len(model.layers), then only the newest "
                "token, ids[:, -1:], with the same cache (filled in place); without it, model(ids[:, -model.max_len:]) "
                "at every step",
    "lm_grad_enabled": "runs the model with gradients enabled: do the work inside torch.no_grad()",
    "lm_ran_in_training_mode": "runs the model in training mode (dropout on): call model.eval() first, then restore "
                               "the mode the model was in",
}
