"""A class for the similarity report: honest answers written independently and in unusual ways
(loops, comprehensions, numpy, float64), pastes from the course library lightly adapted (names
changed, comments dropped, reformatted), and answers two students share with renamed variables.

CLASS[assignment][student][cell] is the code of that answer cell; a student leaves every other
cell as released. ``paste`` copied each of its answers from the library with light changes
(names, comments, layout, a line to fit the signature): each must be flagged. ``share_b`` has
``share_a``'s answers, renamed and reformatted: flagged both ways. ``adapted`` rewrote library
code into the form the assignment asks for (a method into a function, strings into tokens),
which a fingerprint cannot tell from honest work: a less copyable assignment asks for exactly
that effort, so it is not flagged. Everyone else wrote their own answers: never flagged. Among
them the formula-like cases: ``textbook`` and ``formula`` wrote scaled dot-product attention
from its formula (05), ``independent_a`` and ``independent_b`` BLEU (07), which the library's
code contains almost statement for statement. ``light_disguise`` is the mechanical disguise
that once hid every paste; ``MORE_HONEST`` (below) are honest answers to the other assignments,
for the benchmark.
"""

import ast

CLASS = {}


def light_disguise(code: str) -> str:
    """The light mechanical disguise that once hid every paste: docstrings dropped, ``x += y``
    written out as ``x = x + y``, and a no-op assignment after every statement."""
    class Disguise(ast.NodeTransformer):
        def generic_visit(self, node):
            super().generic_visit(node)
            body = getattr(node, "body", None)
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and isinstance(
                    body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                node.body = body[1:] or [ast.Pass()]
            for name in ("body", "orelse"):
                body = getattr(node, name, None)
                if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                    setattr(node, name, [x for i, s in enumerate(body)
                                         for x in (s, *ast.parse(f"_unused{i} = {i}").body)])
            return node

        def visit_AugAssign(self, node):
            load = ast.parse(ast.unparse(node.target), mode="eval").body
            return ast.Assign([node.target], ast.BinOp(load, node.op, node.value))

    tree = Disguise().visit(ast.parse(code))
    return ast.unparse(ast.fix_missing_locations(tree))

CLASS['01_language_models'] = {
    'loops': {
        'count_ngrams': '''def count_ngrams(sentences, n):
    result = Counter()
    for s in sentences:
        if n > 1:
            toks = ["<bos>" for _ in range(n - 1)]
        else:
            toks = []
        toks.extend(s)
        toks.append("<eos>")
        start = 0
        while start + n <= len(toks):
            key = tuple(toks[start:start + n])
            result[key] = result[key] + 1
            start += 1
    return result
''',
        'bigram_probs': '''def mle_bigram_prob(word, prev, bigrams):
    total = 0
    for (first, second), count in bigrams.items():
        if first == prev:
            total += count
    if total == 0:
        return 0.0
    return float(bigrams.get((prev, word), 0)) / total


def addk_bigram_prob(word, prev, bigrams, vocab_size, k):
    total = 0
    for pair in bigrams:
        if pair[0] == prev:
            total += bigrams[pair]
    if total + k * vocab_size == 0:
        return 0.0
    return (bigrams.get((prev, word), 0) + k) / (total + k * vocab_size)
''',
        'sentence_logprob': '''def sentence_logprob(tokens, prob):
    words = list(tokens) + ["<eos>"]
    before = "<bos>"
    logp = 0.0
    for w in words:
        p = prob(w, before)
        if p <= 0:
            return -math.inf
        logp = logp + math.log(p)
        before = w
    return logp
''',
        'perplexity': '''def perplexity(log_probs):
    values = list(log_probs)
    if len(values) == 0:
        raise ValueError("no tokens")
    total = 0.0
    for lp in values:
        if lp > 0:
            raise ValueError("a log-probability cannot be positive")
        total += lp
    if total == -math.inf:
        return math.inf
    return math.exp(-total / len(values))
''',
        'ffn_forward': '''def ffn_forward(context, E, H, b, U, d):
    rows = []
    for i in range(context.shape[0]):
        pieces = [E[j] for j in context[i]]
        x = torch.cat(pieces)
        a = torch.tanh(H @ x + b)
        rows.append(torch.log_softmax(U @ a + d, dim=0))
    return torch.stack(rows)
''',
    },
    'numpy': {
        'count_ngrams': '''def count_ngrams(sentences, n):
    c = Counter()
    for sent in sentences:
        seq = ["<bos>"] * max(n - 1, 0) + [*sent, "<eos>"]
        c.update(zip(*[seq[j:] for j in range(n)]))
    return c
''',
        'bigram_probs': '''def mle_bigram_prob(word, prev, bigrams):
    seen = Counter()
    for (h, w), c in bigrams.items():
        seen[h] += c
    return bigrams[prev, word] / seen[prev] if seen[prev] > 0 else 0.0


def addk_bigram_prob(word, prev, bigrams, vocab_size, k):
    seen = sum(c for pair, c in bigrams.items() if pair[0] == prev)
    if seen == 0 and k == 0:
        return 0.0
    return float((bigrams[prev, word] + k) / (seen + k * vocab_size))
''',
        'sentence_logprob': '''import numpy as np


def sentence_logprob(tokens, prob):
    seq = ["<bos>", *tokens, "<eos>"]
    ps = np.array([prob(b, a) for a, b in zip(seq[:-1], seq[1:])], dtype=np.float64)
    if (ps == 0).any():
        return -math.inf
    return float(np.log(ps).sum())
''',
        'perplexity': '''import numpy as np


def perplexity(log_probs):
    lp = np.array(list(log_probs), dtype=np.float64)
    if lp.size == 0 or (lp > 0).any():
        raise ValueError("need at least one log-probability, none above 0")
    return float(np.exp(-lp.mean())) if np.isfinite(lp).all() else math.inf
''',
        'ffn_forward': '''def ffn_forward(context, E, H, b, U, d):
    B, ctx = context.shape
    m = E.shape[1]
    x = torch.zeros(B, ctx * m, dtype=E.dtype)
    for j in range(ctx):
        x[:, j * m:(j + 1) * m] = E[context[:, j]]
    z = torch.tanh(torch.einsum("hc,bc->bh", H, x) + b)
    logits = torch.einsum("vh,bh->bv", U, z) + d
    return logits - torch.logsumexp(logits, dim=1, keepdim=True)
''',
    },
    'paste': {
        'perplexity': '''import numpy as np


def perplexity(log_probs):
    """exp(-mean log p)"""
    if isinstance(log_probs, torch.Tensor):
        log_probs = log_probs.detach().cpu().double().numpy()
    try:
        vals = np.asarray(log_probs, dtype=np.float64).ravel()
    except (TypeError, ValueError) as e:
        raise TypeError(f"log_probs must be a sequence of numbers, got "
                        f"{type(log_probs).__name__}") from e
    if vals.size == 0:
        raise ValueError("log_probs is empty; perplexity needs at least one token")
    if np.isnan(vals).any():
        raise ValueError("log_probs contains NaN")
    if (vals > 0).any():
        raise ValueError(f"log_probs must be natural-log probabilities (<= 0), got a "
                         f"maximum of {vals.max():.6g}")
    if np.isneginf(vals).any():
        return math.inf
    return math.exp(-vals.mean())
''',
    },
    'share_a': {
        'count_ngrams': '''def count_ngrams(sentences, n):
    grams = Counter()
    for words in sentences:
        padded = ["<bos>"] * (n - 1)
        padded += words
        padded.append("<eos>")
        for i in range(len(padded) - n + 1):
            gram = tuple(padded[i:i + n])
            grams[gram] += 1
    return grams
''',
        'bigram_probs': '''def mle_bigram_prob(word, prev, bigrams):
    c_h = 0
    for (a, b), c in bigrams.items():
        if a == prev:
            c_h += c
    if c_h == 0:
        return 0.0
    return bigrams[(prev, word)] / c_h


def addk_bigram_prob(word, prev, bigrams, vocab_size, k):
    c_h = 0
    for (a, b), c in bigrams.items():
        if a == prev:
            c_h += c
    if c_h + k * vocab_size == 0:
        return 0.0
    return (bigrams[(prev, word)] + k) / (c_h + k * vocab_size)
''',
    },
    'share_b': {
        'count_ngrams': '''def count_ngrams(sentences, n):
    out = Counter()
    for sentence in sentences:
        toks = ['<bos>'] * (n - 1)
        toks += sentence
        toks.append('<eos>')
        for start in range(len(toks) - n + 1):
            ngram = tuple(toks[start : start + n])
            out[ngram] += 1
    return out
''',
        'bigram_probs': '''def mle_bigram_prob(word, prev, bigrams):
    history = 0
    for (left, right), count in bigrams.items():
        if left == prev: history += count
    if history == 0: return 0.0
    return bigrams[(prev, word)] / history


def addk_bigram_prob(word, prev, bigrams, vocab_size, k):
    history = 0
    for (left, right), count in bigrams.items():
        if left == prev: history += count
    if history + k * vocab_size == 0: return 0.0
    return (bigrams[(prev, word)] + k) / (history + k * vocab_size)
''',
    },
    'adapted': {
        'count_ngrams': '''def count_ngrams(sentences, n):
    table = Counter()
    for sent in sentences:
        padded_sent = ["<bos>"] * (n - 1) + list(sent) + ["<eos>"]
        for pos in range(n - 1, len(padded_sent)):
            table[tuple(padded_sent[pos - n + 1 : pos]) + (padded_sent[pos],)] += 1
    return table
''',
        'sentence_logprob': '''def sentence_logprob(tokens, prob):
    def logprob(word, prev):
        p = prob(word, prev)
        return math.log(p) if p > 0 else -math.inf

    padded = ["<bos>"] * (2 - 1) + list(tokens) + ["<eos>"]
    return float(sum([logprob(padded[i], padded[i - 1]) for i in range(2 - 1, len(padded))]))
''',
        'ffn_forward': '''def ffn_forward(context, E, H, b, U, d):
    x = E[context].flatten(1)
    logits = torch.tanh(x @ H.T + b) @ U.T + d
    return logits.log_softmax(-1)
''',
    },
}

CLASS['07_bleu'] = {
    'loops': {
        'ngrams': '''def ngrams(tokens, n):
    out = []
    i = 0
    while i + n <= len(tokens):
        out.append(tuple(tokens[i:i + n]))
        i += 1
    return out
''',
        'max_ref_counts': '''def max_ref_counts(refs_tokens, n, *, parts=None):
    (get_ngrams,) = parts or (ngrams,)
    result = Counter()
    for r in refs_tokens:
        here = Counter()
        for g in get_ngrams(r, n):
            here[g] += 1
        for g in here:
            if here[g] > result[g]:
                result[g] = here[g]
    return result
''',
        'modified_precision': '''def modified_precision(hyp_tokens, refs_tokens, n, *, parts=None):
    get_ngrams, get_max_ref_counts = parts or (ngrams, max_ref_counts)
    clip = get_max_ref_counts(refs_tokens, n)
    counts = {}
    for g in get_ngrams(hyp_tokens, n):
        counts[g] = counts.get(g, 0) + 1
    matched = 0
    for g, c in counts.items():
        matched += min(c, clip.get(g, 0))
    return matched, sum(counts.values())
''',
        'brevity_penalty': '''def brevity_penalty(c, r):
    if c == 0:
        return 0.0
    elif c > r:
        return 1.0
    else:
        return math.exp(1.0 - float(r) / float(c))
''',
        'corpus_bleu': '''def corpus_bleu(hyps, refs, max_n=4, *, parts=None):
    precision, penalty = parts or (modified_precision, brevity_penalty)
    m = [0 for _ in range(max_n)]
    t = [0 for _ in range(max_n)]
    hyp_len = 0
    ref_len = 0
    for i in range(len(hyps)):
        for k in range(max_n):
            a, b = precision(hyps[i], refs[i], k + 1)
            m[k] += a
            t[k] += b
        hyp_len += len(hyps[i])
        lengths = sorted(len(x) for x in refs[i])
        best = lengths[0]
        for L in lengths:
            if abs(L - len(hyps[i])) < abs(best - len(hyps[i])):
                best = L
        ref_len += best
    for k in range(max_n):
        if m[k] == 0:
            return 0.0
    s = 0.0
    for k in range(max_n):
        s += math.log(m[k] / t[k])
    return 100.0 * penalty(hyp_len, ref_len) * math.exp(s / max_n)
''',
    },
    'sets': {
        'max_ref_counts': '''def max_ref_counts(refs_tokens, n, *, parts=None):
    (get_ngrams,) = parts or (ngrams,)
    per_ref = [Counter(get_ngrams(ref, n)) for ref in refs_tokens]
    every = set().union(*per_ref) if per_ref else set()
    return Counter({g: max(c[g] for c in per_ref) for g in every})
''',
        'modified_precision': '''def modified_precision(hyp_tokens, refs_tokens, n, *, parts=None):
    get_ngrams, get_max_ref_counts = parts or (ngrams, max_ref_counts)
    grams = get_ngrams(hyp_tokens, n)
    limit = get_max_ref_counts(refs_tokens, n)
    seen = Counter()
    hits = 0
    for g in grams:
        seen[g] += 1
        if seen[g] <= limit[g]:
            hits += 1
    return hits, len(grams)
''',
        'corpus_bleu': '''def corpus_bleu(hyps, refs, max_n=4, *, parts=None):
    precision, penalty = parts or (modified_precision, brevity_penalty)
    stats = [precision(h, rs, n) for h, rs in zip(hyps, refs) for n in range(1, max_n + 1)]
    matches = [sum(s[0] for s in stats[n::max_n]) for n in range(max_n)]
    totals = [sum(s[1] for s in stats[n::max_n]) for n in range(max_n)]
    if 0 in matches:
        return 0.0
    c = sum(map(len, hyps))
    r = sum(sorted((abs(len(x) - len(h)), len(x)) for x in rs)[0][1] for h, rs in zip(hyps, refs))
    logs = [math.log(a / b) for a, b in zip(matches, totals)]
    return 100 * penalty(c, r) * math.exp(sum(logs) / len(logs))
''',
    },
    'independent_a': {
        'ngrams': '''def ngrams(tokens, n):
    return [tuple(tokens[start:start + n]) for start in range(0, len(tokens) - n + 1)]
''',
        'max_ref_counts': '''def max_ref_counts(refs_tokens, n, *, parts=None):
    (get_ngrams,) = parts or (ngrams,)
    best = Counter()
    for ref in refs_tokens:
        counts = Counter(get_ngrams(ref, n))
        for gram in counts:
            best[gram] = max(best[gram], counts[gram])
    return best
''',
        'modified_precision': '''def modified_precision(hyp_tokens, refs_tokens, n, *, parts=None):
    get_ngrams, get_max_ref_counts = parts or (ngrams, max_ref_counts)
    counts = Counter(get_ngrams(hyp_tokens, n))
    max_counts = get_max_ref_counts(refs_tokens, n)
    clipped = sum(min(count, max_counts[gram]) for gram, count in counts.items())
    return clipped, sum(counts.values())
''',
        'brevity_penalty': '''def brevity_penalty(c, r):
    if c == 0:
        return 0.0
    if c > r:
        return 1.0
    return math.exp(1 - r / c)
''',
        'corpus_bleu': '''def corpus_bleu(hyps, refs, max_n=4, *, parts=None):
    precision, penalty = parts or (modified_precision, brevity_penalty)
    clipped = [0] * max_n
    total = [0] * max_n
    c, r = 0, 0
    for hyp, hyp_refs in zip(hyps, refs):
        for n in range(1, max_n + 1):
            matched, count = precision(hyp, hyp_refs, n)
            clipped[n - 1] += matched
            total[n - 1] += count
        c += len(hyp)
        r += min((abs(len(ref) - len(hyp)), len(ref)) for ref in hyp_refs)[1]
    if min(clipped) == 0:
        return 0.0
    log_p = sum(math.log(clipped[i] / total[i]) for i in range(max_n)) / max_n
    return 100.0 * penalty(c, r) * math.exp(log_p)
''',
    },
    'independent_b': {
        'ngrams': '''def ngrams(tokens, n):
    grams = []
    for i in range(len(tokens) - n + 1):
        grams.append(tuple(tokens[i:i + n]))
    return grams
''',
        'max_ref_counts': '''def max_ref_counts(refs_tokens, n, *, parts=None):
    (get_ngrams,) = parts or (ngrams,)
    result = Counter()
    for ref in refs_tokens:
        result |= Counter(get_ngrams(ref, n))
    return result
''',
        'modified_precision': '''def modified_precision(hyp_tokens, refs_tokens, n, *, parts=None):
    get_ngrams, get_max_ref_counts = parts or (ngrams, max_ref_counts)
    hyp_counts = Counter(get_ngrams(hyp_tokens, n))
    ref_max = get_max_ref_counts(refs_tokens, n)
    matches = 0
    for gram, count in hyp_counts.items():
        matches += min(count, ref_max.get(gram, 0))
    return matches, sum(hyp_counts.values())
''',
        'brevity_penalty': '''def brevity_penalty(c, r):
    if c > r:
        return 1.0
    if c == 0:
        return 0.0
    return math.exp(1.0 - r / c)
''',
        'corpus_bleu': '''def corpus_bleu(hyps, refs, max_n=4, *, parts=None):
    precision, penalty = parts or (modified_precision, brevity_penalty)
    numerators = [0] * max_n
    denominators = [0] * max_n
    hyp_len = ref_len = 0
    for hyp, references in zip(hyps, refs):
        hyp_len += len(hyp)
        ref_len += min((len(ref) for ref in references),
                       key=lambda length: (abs(length - len(hyp)), length))
        for n in range(1, max_n + 1):
            num, den = precision(hyp, references, n)
            numerators[n - 1] += num
            denominators[n - 1] += den
    if 0 in numerators:
        return 0.0
    precisions = [num / den for num, den in zip(numerators, denominators)]
    geo_mean = math.exp(sum(math.log(p) for p in precisions) / max_n)
    return 100 * penalty(hyp_len, ref_len) * geo_mean
''',
    },
    'paste': {
        'ngrams': '''def ngrams(tokens, n):
    if isinstance(tokens, str):
        raise TypeError("tokens must be a list of str, got a str; split it first")
    return list(zip(*(tokens[i:] for i in range(n))))
''',
        'modified_precision': '''def modified_precision(hyp_tokens, refs_tokens, n, *, parts=None):
    get_ngrams, get_max_ref_counts = parts or (ngrams, max_ref_counts)
    hyp = Counter(get_ngrams(hyp_tokens, n))
    max_ref = Counter()
    for ref in refs_tokens:
        max_ref |= Counter(get_ngrams(ref, n))
    return sum(min(c, max_ref[g]) for g, c in hyp.items()), sum(hyp.values())
''',
        'brevity_penalty': '''def brevity_penalty(c, r):
    if c < 0 or r < 0:
        raise ValueError(f"lengths must be >= 0, got c={c}, r={r}")
    if c >= r:
        return 1.0
    return math.exp(1 - r / c) if c > 0 else 0.0
''',
    },
    'share_a': {
        'corpus_bleu': '''def corpus_bleu(hyps, refs, max_n=4, *, parts=None):
    precision, penalty = parts or (modified_precision, brevity_penalty)
    num = [0] * max_n
    den = [0] * max_n
    hyp_total, ref_total = 0, 0
    for hyp, refs_i in zip(hyps, refs):
        for order in range(max_n):
            got = precision(hyp, refs_i, order + 1)
            num[order] += got[0]
            den[order] += got[1]
        hyp_total += len(hyp)
        closest = sorted(refs_i, key=lambda ref: (abs(len(ref) - len(hyp)), len(ref)))[0]
        ref_total += len(closest)
    if any(x == 0 for x in num):
        return 0.0
    score = math.exp(sum(math.log(a / b) for a, b in zip(num, den)) / max_n)
    return 100 * penalty(hyp_total, ref_total) * score
''',
    },
    'share_b': {
        'corpus_bleu': '''def corpus_bleu(hyps, refs, max_n=4, *, parts=None):
    precision, penalty = parts or (modified_precision, brevity_penalty)
    hits = [0] * max_n; possible = [0] * max_n
    c_len, r_len = 0, 0
    for h, rs in zip(hyps, refs):
        for j in range(max_n):
            res = precision(h, rs, j + 1)
            hits[j] += res[0]; possible[j] += res[1]
        c_len += len(h)
        nearest = sorted(rs, key=lambda x: (abs(len(x) - len(h)), len(x)))[0]
        r_len += len(nearest)
    if any(v == 0 for v in hits): return 0.0
    geo = math.exp(sum(math.log(a / b) for a, b in zip(hits, possible)) / max_n)
    return 100 * penalty(c_len, r_len) * geo
''',
    },
    'adapted': {
        'corpus_bleu': '''def corpus_bleu(hyps, refs, max_n=4, *, parts=None):
    precision, penalty = parts or (modified_precision, brevity_penalty)
    counts, totals = [0] * max_n, [0] * max_n
    sys_len = ref_len = 0
    for hyp, references in zip(hyps, refs):
        for n in range(1, max_n + 1):
            m, t = precision(hyp, references, n)
            counts[n - 1] += m
            totals[n - 1] += t
        sys_len += len(hyp)
        ref_len += min([len(t) for t in references], key=lambda r: (abs(len(hyp) - r), r))
    if not all(counts):
        return 0.0
    logs = [math.log(100.0 * counts[n] / totals[n]) for n in range(max_n)]
    return penalty(sys_len, ref_len) * math.exp(sum(logs) / max_n)
''',
    },
}

CLASS['05_transformer'] = {
    'loops': {
        'sdpa': '''def scaled_dot_product_attention(query, key, value, mask=None):
    d_k = query.size(-1)
    logits = torch.matmul(query, key.transpose(-1, -2)) / d_k ** 0.5
    if mask is None:
        attn = torch.softmax(logits, dim=-1)
    else:
        allowed = mask.expand(logits.shape)
        logits = torch.where(allowed, logits, torch.full_like(logits, -math.inf))
        attn = torch.exp(logits - logits.amax(-1, keepdim=True).clamp(min=-1e30))
        attn = attn * allowed
        total = attn.sum(-1, keepdim=True)
        attn = torch.where(total > 0, attn / total.clamp(min=1e-300), torch.zeros_like(attn))
    return torch.matmul(attn, value), attn
''',
        'split_merge': '''def split_heads(x, n_heads):
    B, T, D = x.shape
    if D % n_heads != 0:
        raise ValueError("n_heads must divide d_model")
    size = D // n_heads
    heads = [x[:, :, i * size:(i + 1) * size] for i in range(n_heads)]
    return torch.stack(heads, dim=1)


def merge_heads(x):
    return torch.cat([x[:, i] for i in range(x.shape[1])], dim=-1)
''',
        'block': '''def pre_ln_block(x, params, n_heads, mask=None, *, parts=None):
    (mha,) = parts or (multi_head_attention,)

    def norm(t, g, b):
        mu = t.mean(-1, keepdim=True)
        sigma2 = t.var(-1, unbiased=False, keepdim=True)
        return (t - mu) / (sigma2 + 1e-5).sqrt() * g + b

    y = norm(x, params["ln1_gamma"], params["ln1_beta"])
    attended, _ = mha(y, y, y, params["W_q"], params["W_k"], params["W_v"], params["W_o"],
                      n_heads, mask)
    h = x + attended
    y = norm(h, params["ln2_gamma"], params["ln2_beta"])
    hidden = (y @ params["W1"].t() + params["b1"]).clamp(min=0)
    return h + hidden @ params["W2"].t() + params["b2"]
''',
    },
    'einsum': {
        'sdpa': '''def scaled_dot_product_attention(query, key, value, mask=None):
    scale = 1.0 / math.sqrt(key.shape[-1])
    s = torch.einsum("...td,...sd->...ts", query, key) * scale
    if mask is not None:
        s = s.masked_fill(mask.logical_not(), float("-inf"))
    w = F.softmax(s, dim=-1)
    w = torch.nan_to_num(w, nan=0.0)
    return torch.einsum("...ts,...sv->...tv", w, value), w
''',
        'split_merge': '''def split_heads(x, n_heads):
    if x.shape[-1] % n_heads:
        raise ValueError(f"cannot split {x.shape[-1]} features into {n_heads} heads")
    return torch.einsum("bthk->bhtk", x.unflatten(-1, (n_heads, -1)))


def merge_heads(x):
    return torch.einsum("bhtk->bthk", x).flatten(2)
''',
    },
    'paste': {
        'sdpa': '''def scaled_dot_product_attention(query, key, value, mask=None):
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"shapes do not fit: query {tuple(query.shape)}, key {tuple(key.shape)}, value "
            f"{tuple(value.shape)}; need query (..., T, d), key (..., S, d), value (..., S, d_v)"
        )
    scores = (query / math.sqrt(query.shape[-1])) @ key.transpose(-2, -1)
    if mask is not None:
        try:
            torch.broadcast_shapes(mask.shape, scores.shape)
        except RuntimeError as err:
            raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to the "
                             f"scores' shape {tuple(scores.shape)} (..., T, S)") from err
        mask = mask.expand_as(scores)
        scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        weights = weights.masked_fill(~mask.expand_as(weights), 0.0)
    else:
        weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights
''',
    },
    'textbook': {
        'sdpa': '''def scaled_dot_product_attention(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, float("-inf"))
    p_attn = scores.softmax(dim=-1)
    p_attn = torch.nan_to_num(p_attn, nan=0.0)
    return torch.matmul(p_attn, value), p_attn
''',
    },
    'formula': {
        'sdpa': '''def scaled_dot_product_attention(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    weights = weights.masked_fill(weights.isnan(), 0.0)
    return weights @ value, weights
''',
    },
    'adapted': {
        'split_merge': '''def split_heads(x, n_heads):
    if x.shape[-1] % n_heads:
        raise ValueError(f"d_model ({x.shape[-1]}) must be divisible by n_heads ({n_heads})")
    return x.view(x.shape[0], x.shape[1], n_heads, x.shape[-1] // n_heads).transpose(1, 2)


def merge_heads(x):
    return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], -1)
''',
    },
}

# More honest answers, written independently from each part's text and formula (the benchmark
# benchmarks/similarity_disguises.py measures false positives on them with the class above).
MORE_HONEST = {}

MORE_HONEST['02_rnn_backprop'] = {
    'honest_a': {
        'softmax_ce': '''def softmax_ce_grad(z, k):
    shifted = z - np.max(z)
    probs = np.exp(shifted) / np.sum(np.exp(shifted))
    onehot = np.zeros_like(probs)
    onehot[k] = 1.0
    return probs - onehot


def output_weight_grad(h, z, k):
    dz = softmax_ce_grad(z, k)
    return dz[:, None] * h[None, :]
''',
        'lstm_cell': '''def lstm_cell(x, h, c, W_ih, W_hh, b_ih, b_hh):
    def sigmoid(t):
        return 1.0 / (1.0 + np.exp(-t))

    gates = x @ W_ih.T + h @ W_hh.T + b_ih + b_hh
    H = h.shape[1]
    i = sigmoid(gates[:, :H])
    f = sigmoid(gates[:, H:2 * H])
    g = np.tanh(gates[:, 2 * H:3 * H])
    o = sigmoid(gates[:, 3 * H:])
    c_next = f * c + i * g
    h_next = o * np.tanh(c_next)
    return h_next, c_next
''',
    },
}

MORE_HONEST['03_seq2seq'] = {
    'honest_a': {
        'masked_loss': '''def masked_sequence_loss(logits, targets, pad_id=PAD):
    keep = targets.ne(pad_id)
    if keep.sum() == 0:
        raise ValueError("every target is padding")
    losses = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(),
                                               reduction="none")
    return (losses * keep.flatten()).sum() / keep.sum()
''',
    },
}

MORE_HONEST['04_attention'] = {
    'textbook': {
        'sdpa': '''def scaled_dot_product_attention(query, key, value, mask=None):
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(key.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    return torch.matmul(weights, value), weights
''',
    },
    'honest_a': {
        'scores': '''def dot_score(s, h):
    return (h * s.unsqueeze(1)).sum(-1)


def bilinear_score(s, h, W):
    return torch.bmm(h, (s @ W).unsqueeze(-1)).squeeze(-1)


def additive_score(s, h, W, U, v):
    hidden = torch.tanh(h @ U.T + (s @ W.T).unsqueeze(1))
    return hidden @ v
''',
        'softmax_context': '''def masked_softmax(scores, lengths):
    positions = torch.arange(scores.size(1)).unsqueeze(0)
    valid = positions < lengths.unsqueeze(1)
    e = torch.exp(scores - scores.max(dim=1, keepdim=True).values) * valid
    total = e.sum(dim=1, keepdim=True)
    return torch.where(total > 0, e / total.clamp_min(1e-30), torch.zeros_like(e))


def context_vector(weights, h):
    return (weights.unsqueeze(-1) * h).sum(dim=1)
''',
    },
}

MORE_HONEST['06_decoding'] = {
    'honest_a': {
        'filters': '''def temperature_scale(log_probs, T):
    if T <= 0:
        raise ValueError("T must be positive")
    scaled = log_probs / T
    return scaled - torch.logsumexp(scaled, dim=-1, keepdim=True)


def top_k_filter(log_probs, k):
    if k < 1:
        raise ValueError("k must be at least 1")
    k = min(k, log_probs.size(-1))
    threshold = torch.sort(log_probs, dim=-1, descending=True).values[..., k - 1:k]
    kept = torch.where(log_probs >= threshold, log_probs, torch.full_like(log_probs, -math.inf))
    return kept - torch.logsumexp(kept, dim=-1, keepdim=True)


def top_p_filter(log_probs, p):
    if p <= 0 or p > 1:
        raise ValueError("p must be in (0, 1]")
    probs = log_probs.exp()
    values, idx = probs.sort(dim=-1, descending=True)
    before = values.cumsum(-1) - values
    keep_sorted = before < p
    keep = torch.zeros_like(keep_sorted).scatter(-1, idx, keep_sorted)
    kept = log_probs.masked_fill(~keep, -math.inf)
    return kept - torch.logsumexp(kept, dim=-1, keepdim=True)
''',
        'sample_step': '''def sample_step(log_probs, generator, temperature=1.0, top_k=None,
                top_p=None, *, parts=None):
    scale, keep_top_k, keep_top_p = parts or (temperature_scale, top_k_filter, top_p_filter)
    out = scale(log_probs, temperature)
    out = out if top_k is None else keep_top_k(out, top_k)
    out = out if top_p is None else keep_top_p(out, top_p)
    probs = torch.softmax(out, dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator)[:, 0]
''',
    },
}

MORE_HONEST['08_bert_mlm'] = {
    'honest_a': {
        'mlm_loss': '''def mlm_loss(logits, labels):
    if (labels != -100).sum() == 0:
        raise ValueError("no position has a label")
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                           ignore_index=-100)
''',
    },
}
