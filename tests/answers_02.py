"""Answers to assignment 02's ``rnn_backward`` cell, honest and not, each the whole cell.

Honest ones are backpropagation through time written in unusual ways (every gradient right, a
cost that grows like a forward pass's); the others get right gradients some other way (numerical
or forward-mode differentiation, precomputed answers) or are fast only where they expect to be
timed. ``test_assignment_02.py`` grades them and pins each one's points; ``cost_table`` measures
what each costs at the cost cell's two model sizes, for the README.
"""

# ---------------------------------------------------------------- backpropagation through time
VECTORISED = '''def rnn_backward(params, ids, targets, hs, probs):
    """BPTT with one loop, over the recurrence only; every sum over time is a matrix product."""
    E, W, U, V = params["E"], params["W"], params["U"], params["V"]
    T = len(ids)
    dz = probs.copy()
    dz[np.arange(T), targets] -= 1
    dz /= T
    from_output = dz @ V
    gate = 1 - hs[1:] ** 2
    da = np.zeros_like(hs[1:])
    carry = np.zeros_like(hs[0])
    for t in range(T - 1, -1, -1):
        da[t] = (from_output[t] + carry) * gate[t]
        carry = da[t] @ U
    dE = np.zeros_like(E)
    np.add.at(dE, ids, da @ W)
    return {"E": dE, "W": da.T @ E[ids], "U": da.T @ hs[:-1], "b": da.sum(0),
            "V": dz.T @ hs[1:], "c": dz.sum(0), "h0": carry}
'''

EINSUM = '''def rnn_backward(params, ids, targets, hs, probs):
    """BPTT where every product is an einsum."""
    E, W, U, V = params["E"], params["W"], params["U"], params["V"]
    T = len(ids)
    dz = (probs - np.eye(V.shape[0])[targets]) / T
    da, carry = [], np.zeros_like(hs[0])
    for t in reversed(range(T)):
        a = (np.einsum("v,vh->h", dz[t], V) + carry) * (1 - hs[t + 1] ** 2)
        da.insert(0, a)
        carry = np.einsum("i,ij->j", a, U)
    da = np.array(da)
    return {"E": np.einsum("tv,td->vd", np.eye(E.shape[0])[ids], np.einsum("ti,id->td", da, W)),
            "W": np.einsum("ti,td->id", da, E[ids]), "U": np.einsum("ti,tj->ij", da, hs[:-1]),
            "b": np.einsum("ti->i", da), "V": np.einsum("tv,th->vh", dz, hs[1:]),
            "c": np.einsum("tv->v", dz), "h0": carry}
'''

RECURSIVE = '''def rnn_backward(params, ids, targets, hs, probs):
    """BPTT as a recursion: step t returns dJ/dh_{t-1} after the steps after it have run."""
    E, W, U, V = params["E"], params["W"], params["U"], params["V"]
    T = len(ids)
    grads = {k: np.zeros_like(params[k]) for k in ("E", "W", "U", "b", "V", "c")}

    def back(t):  # dJ/dh_t through h_{t+1} and later (t counts steps from 0)
        if t == T:
            return np.zeros_like(hs[0])
        later = back(t + 1)
        dz = probs[t] - (np.arange(len(probs[t])) == targets[t])
        dz = dz / T
        grads["V"] += np.outer(dz, hs[t + 1])
        grads["c"] += dz
        da = (V.T @ dz + later) * (1 - hs[t + 1] ** 2)
        grads["W"] += np.outer(da, E[ids[t]])
        grads["U"] += np.outer(da, hs[t])
        grads["b"] += da
        grads["E"][ids[t]] += W.T @ da
        return U.T @ da

    grads["h0"] = back(0)
    return grads
'''

WITH_A_CLASS = '''class Backprop:
    """The backward pass of the RNN LM as an object: one method per step."""

    def __init__(self, params, ids, targets, hs, probs):
        self.p, self.ids, self.targets, self.hs, self.probs = params, ids, targets, hs, probs
        self.T = len(ids)
        self.grads = {k: np.zeros_like(v) for k, v in params.items()}

    def step(self, t, carry):
        dz = self.probs[t].copy()
        dz[self.targets[t]] -= 1
        dz /= self.T
        self.grads["V"] += np.outer(dz, self.hs[t + 1])
        self.grads["c"] += dz
        da = (self.p["V"].T @ dz + carry) * (1 - self.hs[t + 1] ** 2)
        self.grads["W"] += np.outer(da, self.p["E"][self.ids[t]])
        self.grads["U"] += np.outer(da, self.hs[t])
        self.grads["b"] += da
        self.grads["E"][self.ids[t]] += self.p["W"].T @ da
        return self.p["U"].T @ da

    def run(self):
        carry = np.zeros_like(self.hs[0])
        for t in reversed(range(self.T)):
            carry = self.step(t, carry)
        return {**self.grads, "h0": carry}


def rnn_backward(params, ids, targets, hs, probs):
    return Backprop(params, ids, targets, hs, probs).run()
'''

ENTRY_LOOPS = '''def rnn_backward(params, ids, targets, hs, probs):
    """BPTT with Python loops over every entry of the weight gradients: slow, not numerical."""
    E, W, U, V = params["E"], params["W"], params["U"], params["V"]
    T, H, C, D = len(ids), hs.shape[1], V.shape[0], E.shape[1]
    g = {k: np.zeros_like(params[k]) for k in ("E", "W", "U", "b", "V", "c")}
    carry = np.zeros(H)
    for t in reversed(range(T)):
        dz = probs[t].copy()
        dz[targets[t]] -= 1
        dz /= T
        for i in range(C):
            for j in range(H):
                g["V"][i, j] += dz[i] * hs[t + 1][j]
        g["c"] += dz
        da = (V.T @ dz + carry) * (1 - hs[t + 1] ** 2)
        for i in range(H):
            for j in range(H):
                g["U"][i, j] += da[i] * hs[t][j]
            for j in range(D):
                g["W"][i, j] += da[i] * E[ids[t]][j]
        g["b"] += da
        g["E"][ids[t]] += W.T @ da
        carry = U.T @ da
    g["h0"] = carry
    return g
'''

ALL_LOOPS = '''def rnn_backward(params, ids, targets, hs, probs):
    """BPTT with every product, the backward ones too, as Python loops over numpy entries."""
    E, W, U, V = params["E"], params["W"], params["U"], params["V"]
    T, H, C, D = len(ids), hs.shape[1], V.shape[0], E.shape[1]
    g = {k: np.zeros_like(params[k]) for k in ("E", "W", "U", "b", "V", "c")}
    carry = np.zeros(H)
    for t in reversed(range(T)):
        dz = probs[t].copy()
        dz[targets[t]] -= 1
        dz /= T
        dh = carry.copy()
        for i in range(C):
            g["c"][i] += dz[i]
            for j in range(H):
                g["V"][i, j] += dz[i] * hs[t + 1][j]
                dh[j] += V[i, j] * dz[i]
        da = np.zeros(H)
        for j in range(H):
            da[j] = dh[j] * (1 - hs[t + 1][j] ** 2)
        carry = np.zeros(H)
        for i in range(H):
            g["b"][i] += da[i]
            for j in range(H):
                g["U"][i, j] += da[i] * hs[t][j]
                carry[j] += U[i, j] * da[i]
            for j in range(D):
                g["W"][i, j] += da[i] * E[ids[t], j]
                g["E"][ids[t], j] += W[i, j] * da[i]
    g["h0"] = carry
    return g
'''

PURE_PYTHON = '''def rnn_backward(params, ids, targets, hs, probs):
    """BPTT over Python lists of floats: every multiply-add written out, no numpy inside."""
    E, W, U, V = (params[k].tolist() for k in ("E", "W", "U", "V"))
    hl, pl = hs.tolist(), probs.tolist()
    T, H, C, D = len(ids), len(hl[0]), len(V), len(E[0])
    gE, gW = [[0.0] * D for _ in E], [[0.0] * D for _ in range(H)]
    gU, gb = [[0.0] * H for _ in range(H)], [0.0] * H
    gV, gc = [[0.0] * H for _ in range(C)], [0.0] * C
    carry = [0.0] * H
    for t in reversed(range(T)):
        dz = [p / T for p in pl[t]]
        dz[int(targets[t])] -= 1.0 / T
        h, before, x = hl[t + 1], hl[t], E[int(ids[t])]
        dh = list(carry)
        for i in range(C):
            gc[i] += dz[i]
            for j in range(H):
                gV[i][j] += dz[i] * h[j]
                dh[j] += V[i][j] * dz[i]
        da = [dh[j] * (1 - h[j] * h[j]) for j in range(H)]
        carry = [0.0] * H
        dx = gE[int(ids[t])]
        for i in range(H):
            gb[i] += da[i]
            for j in range(H):
                gU[i][j] += da[i] * before[j]
                carry[j] += U[i][j] * da[i]
            for j in range(D):
                gW[i][j] += da[i] * x[j]
                dx[j] += W[i][j] * da[i]
    return {"E": np.array(gE), "W": np.array(gW), "U": np.array(gU), "b": np.array(gb),
            "V": np.array(gV), "c": np.array(gc), "h0": np.array(carry)}
'''

# ------------------------------------------------- right gradients, not by backpropagation
_PER_PARAMETER = '''def rnn_backward(params, ids, targets, hs, probs):
    """Every gradient from the loss alone, one parameter at a time: no backpropagation."""
    theta = {**params, "h0": hs[0]}
    grads = {}
    for name, value in theta.items():
        grads[name] = np.zeros_like(value)
        for index in np.ndindex(value.shape):
'''
_COMPLEX_LOSS = '''

def _complex_loss(p, ids, targets, h):
    total = 0
    for x, y in zip(ids, targets):
        h = np.tanh(p["W"] @ p["E"][x] + p["U"] @ h + p["b"])
        z = p["V"] @ h + p["c"]
        z = z - z.real.max()
        total = total + np.log(np.exp(z).sum()) - z[y]
    return total / len(ids)
'''
COMPLEX_STEP = _PER_PARAMETER + '''\
            moved = {k: v.astype(complex) for k, v in theta.items()}
            moved[name][index] += 1e-30j
            rest = {k: v for k, v in moved.items() if k != "h0"}
            loss = _complex_loss(rest, ids, targets, moved["h0"])
            grads[name][index] = loss.imag / 1e-30
    return grads
''' + _COMPLEX_LOSS

FINITE_DIFFERENCES = _PER_PARAMETER + '''\
            up = {k: v.copy() for k, v in theta.items()}
            down = {k: v.copy() for k, v in theta.items()}
            up[name][index] += 1e-6
            down[name][index] -= 1e-6
            loss_up = rnn_forward({k: v for k, v in up.items() if k != "h0"}, ids, targets,
                                  up["h0"])[2]
            loss_down = rnn_forward({k: v for k, v in down.items() if k != "h0"}, ids,
                                    targets, down["h0"])[2]
            grads[name][index] = (loss_up - loss_down) / 2e-6
    return grads
'''

_BATCHED = '''NAMES = ("E", "W", "U", "b", "V", "c", "h0")


def _batched_losses(theta, ids, targets, rows):
    """The mean loss of every row of ``rows`` [B, P] (all parameters, flattened), at once."""
    ends = np.cumsum([0] + [theta[k].size for k in NAMES])
    part = {k: rows[:, ends[i]:ends[i + 1]].reshape((len(rows),) + theta[k].shape)
            for i, k in enumerate(NAMES)}
    h, loss, batch = part["h0"], 0, np.arange(len(rows))
    for x, y in zip(ids, targets):
        h = np.tanh(np.einsum("bhd,bd->bh", part["W"], part["E"][:, x])
                    + np.einsum("bhk,bk->bh", part["U"], h) + part["b"])
        z = np.einsum("bvh,bh->bv", part["V"], h) + part["c"]
        z = z - z.real.max(1, keepdims=True)
        loss = loss + np.log(np.exp(z).sum(1)) - z[batch, y]
    return loss / len(ids)


def _flat(theta):
    return np.concatenate([theta[k].ravel() for k in NAMES])


def _unflat(theta, g):
    ends = np.cumsum([0] + [theta[k].size for k in NAMES])
    return {k: g[ends[i]:ends[i + 1]].reshape(theta[k].shape) for i, k in enumerate(NAMES)}
'''

BATCHED_FINITE_DIFFERENCES = _BATCHED + '''

def rnn_backward(params, ids, targets, hs, probs):
    """Central differences of every parameter, 256 parameters per batched forward pass."""
    theta = {**params, "h0": hs[0]}
    flat = _flat(theta)
    g = np.zeros(flat.size)
    for start in range(0, flat.size, 256):
        which = np.arange(start, min(flat.size, start + 256))
        rows = np.repeat(flat[None, :], 2 * len(which), 0)
        rows[np.arange(len(which)), which] += 1e-6
        rows[len(which) + np.arange(len(which)), which] -= 1e-6
        loss = _batched_losses(theta, ids, targets, rows)
        g[which] = (loss[:len(which)] - loss[len(which):]) / 2e-6
    return _unflat(theta, g)
'''

BATCHED_COMPLEX_STEP = _BATCHED + '''

def rnn_backward(params, ids, targets, hs, probs):
    """Complex steps of every parameter, 512 parameters per batched forward pass: exact."""
    theta = {**params, "h0": hs[0]}
    flat = _flat(theta).astype(complex)
    g = np.zeros(flat.size)
    for start in range(0, flat.size, 512):
        which = np.arange(start, min(flat.size, start + 512))
        rows = np.repeat(flat[None, :], len(which), 0)
        rows[np.arange(len(which)), which] += 1e-30j
        g[which] = _batched_losses(theta, ids, targets, rows).imag / 1e-30
    return _unflat(theta, g)
'''

FORWARD_MODE = '''def rnn_backward(params, ids, targets, hs, probs):
    """Forward-mode differentiation: the derivative of the state with respect to every
    parameter (a matrix [H, P]) carried forward with the state. Exact, and no BPTT."""
    names = ("E", "W", "U", "b", "V", "c", "h0")
    theta = {**params, "h0": hs[0]}
    ends = np.cumsum([0] + [theta[k].size for k in names])
    at = {k: slice(ends[i], ends[i + 1]) for i, k in enumerate(names)}
    E, W, U, V = params["E"], params["W"], params["U"], params["V"]
    H, D, T = U.shape[0], E.shape[1], len(ids)
    J = np.zeros((H, ends[-1]))  # dh_t / dtheta
    J[:, at["h0"]] = np.eye(H)
    grad = np.zeros(ends[-1])
    for t in range(T):
        A = U @ J
        A[:, at["W"]] += np.kron(np.eye(H), E[ids[t]])
        A[:, at["U"]] += np.kron(np.eye(H), hs[t])
        A[:, at["b"]] += np.eye(H)
        A[:, ends[0] + ids[t] * D + np.arange(D)] += W
        J = (1 - hs[t + 1] ** 2)[:, None] * A
        dz = probs[t].copy()
        dz[targets[t]] -= 1
        grad += (dz @ V) @ J / T
        grad[at["V"]] += np.outer(dz, hs[t + 1]).ravel() / T
        grad[at["c"]] += dz / T
    return {k: grad[at[k]].reshape(theta[k].shape) for k in names}
'''

FORWARD_MODE_RECURRENT = '''def rnn_backward(params, ids, targets, hs, probs):
    """Forward mode only where the recurrence needs it (W, U, b, h0 and the rows of E that
    occur); the output layer's gradients in closed form, as in part 1."""
    E, W, U, V = params["E"], params["W"], params["U"], params["V"]
    H, D, T = U.shape[0], E.shape[1], len(ids)
    rows = {w: k for k, w in enumerate(sorted(set(ids.tolist())))}
    sizes = {"W": H * D, "U": H * H, "b": H, "h0": H, "E": len(rows) * D}
    ends = dict(zip(sizes, np.cumsum(list(sizes.values())) - list(sizes.values())))
    J = np.zeros((H, sum(sizes.values())))
    J[:, ends["h0"]:ends["h0"] + H] = np.eye(H)
    grad, dV, dc = np.zeros(J.shape[1]), np.zeros_like(V), np.zeros_like(params["c"])
    for t in range(T):
        A = U @ J
        A[:, ends["W"]:ends["W"] + H * D] += np.kron(np.eye(H), E[ids[t]])
        A[:, ends["U"]:ends["U"] + H * H] += np.kron(np.eye(H), hs[t])
        A[:, ends["b"]:ends["b"] + H] += np.eye(H)
        start = ends["E"] + rows[int(ids[t])] * D
        A[:, start:start + D] += W
        J = (1 - hs[t + 1] ** 2)[:, None] * A
        dz = probs[t].copy()
        dz[targets[t]] -= 1
        dz /= T
        grad += (dz @ V) @ J
        dV += np.outer(dz, hs[t + 1])
        dc += dz
    dE = np.zeros_like(E)
    for w, k in rows.items():
        dE[w] = grad[ends["E"] + k * D:ends["E"] + (k + 1) * D]
    part = {k: grad[ends[k]:ends[k] + n] for k, n in sizes.items()}
    return {"E": dE, "W": part["W"].reshape(H, D), "U": part["U"].reshape(H, H), "b": part["b"],
            "V": dV, "c": dc, "h0": part["h0"]}
'''

# the visible cost test spells out its inputs: work their gradients out before any clock runs
# (forward mode, exact) and answer from memory; complex steps for anything else
MEMOIZED = COMPLEX_STEP.replace("def rnn_backward(", "def _complex_step(") + '''

def _key(params, ids, targets, hs):
    return tuple(v.tobytes() for v in (*params.values(), ids, targets, hs))


''' + FORWARD_MODE.replace("def rnn_backward(", "def _forward_mode(") + '''

_KNOWN = {}
for _vocab, _d, _h, _T in ((40, 16, 48, 20), (16, 8, 320, 1)):
    _rng = np.random.default_rng([12, _h])
    _p = {"E": _rng.normal(size=(_vocab, _d)), "W": _rng.normal(size=(_h, _d)) / _d ** 0.5,
          "U": _rng.normal(size=(_h, _h)) / _h ** 0.5, "b": _rng.normal(size=_h) * 0.1,
          "V": _rng.normal(size=(_vocab, _h)) / _h ** 0.5, "c": _rng.normal(size=_vocab) * 0.1}
    _ids, _tg = _rng.integers(0, _vocab, _T), _rng.integers(0, _vocab, _T)
    _hs, _probs, _ = rnn_forward(_p, _ids, _tg, _rng.normal(size=_h) * 0.5)
    _KNOWN[_key(_p, _ids, _tg, _hs)] = _forward_mode(_p, _ids, _tg, _hs, _probs)


def rnn_backward(params, ids, targets, hs, probs):
    known = _KNOWN.get(_key(params, ids, targets, hs))
    if known is not None:
        return {k: v.copy() for k, v in known.items()}
    return _complex_step(params, ids, targets, hs, probs)
'''

# complex steps where the model is small (the other cells), anything fast where it is timed
DODGING_THE_CLOCK = COMPLEX_STEP.replace('''    theta = {**params, "h0": hs[0]}
''', '''    theta = {**params, "h0": hs[0]}
    if sum(v.size for v in theta.values()) > 500:  # only the cost test's models are this big
        return {k: np.zeros_like(v) for k, v in theta.items()}
''')

# BPTT whose CPU time runs in processes it starts and does not wait for, where the grader
# cannot count it without a cgroup that does
IN_A_CHILD = '''import os
import pickle
import signal
import time


def _bptt(params, ids, targets, hs, probs):
''' + "\n".join(line for line in VECTORISED.splitlines()[2:]) + '''


def rnn_backward(params, ids, targets, hs, probs):
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children vanish when they end
    read, write = os.pipe()
    if os.fork() == 0:
        os.close(read)
        data = pickle.dumps(_bptt(params, ids, targets, hs, probs))
        started = time.process_time()  # and two CPU-seconds of work of no use, which the
        while time.process_time() - started < 2:  # parent does not pay for
            np.linalg.svd(np.ones((40, 40)))
        os.write(write, data)
        os._exit(0)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 1 << 20):
        chunks.append(chunk)
    os.close(read)
    return pickle.loads(b"".join(chunks))
'''

AUTOGRAD = '''def rnn_backward(params, ids, targets, hs, probs):
    import torch

    tp = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    h = torch.tensor(hs[0], requires_grad=True)
    return {k: v.grad.numpy() for k, v in tp.items()}
'''

HONEST = {"vectorised": VECTORISED, "einsum": EINSUM, "recursive": RECURSIVE,
          "with_a_class": WITH_A_CLASS, "entry_loops": ENTRY_LOOPS, "all_loops": ALL_LOOPS,
          "pure_python": PURE_PYTHON}
NOT_BACKPROPAGATION = {"complex_step": COMPLEX_STEP, "finite_differences": FINITE_DIFFERENCES,
                       "batched_finite_differences": BATCHED_FINITE_DIFFERENCES,
                       "batched_complex_step": BATCHED_COMPLEX_STEP,
                       "forward_mode": FORWARD_MODE,
                       "forward_mode_recurrent": FORWARD_MODE_RECURRENT,
                       "memoized": MEMOIZED, "dodging_the_clock": DODGING_THE_CLOCK}
