"""The probe engine (bertkit.probe.engine) against scikit-learn, the reference it replaces: the same objective
solved to a tight tolerance gives the same coefficients and probabilities (binary, multiclass with balanced class
weights and a rare class, one-vs-rest tags, ridge); warm starts reach the same optimum; rows read in blocks,
streamed or in memory, give the same solution; the fit is deterministic; the folds and the standardisation are
scikit-learn's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertkit.probe import cv as folds_cv
from bertkit.probe import engine
from bertkit.probe import fit as probe_fit
from bertkit.probe.heads import LogisticHead

TIGHT = 1e-7  # the engine's tolerance here (its default, scikit-learn's, is 1e-4)


def overlapping(n: int, d: int, classes: int, seed: int = 0, offset: float = 3.0) -> tuple[np.ndarray, np.ndarray]:
    """Classes that overlap (a unique, well-conditioned optimum), on features with means and scales far from 0 and
    1 (the standardisation matters)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, size=n)
    centers = rng.normal(size=(classes, d))
    X = centers[y] + rng.normal(size=(n, d))
    return (X * rng.uniform(0.5, 3.0, size=d) + offset * rng.normal(size=d)).astype(np.float32), y


def reference(X: np.ndarray, y: np.ndarray, C: float, class_weight: str | None = None):
    """scikit-learn's StandardScaler + LogisticRegression(lbfgs), solved to 1e-10 in float64 (on float32 features
    its own solution stops at float32's resolution)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(X)
    lr = LogisticRegression(C=C, class_weight=class_weight, tol=1e-10, max_iter=10000)
    return scaler, lr.fit(scaler.transform(X).astype(np.float64), y)


def engine_fit(X: np.ndarray, ids: np.ndarray, n_classes: int, C: float, class_weight: str | None = None,
               **kwargs) -> tuple[engine.LinearSolution, np.ndarray]:
    scaler = engine.standardizer_of(engine.array_blocks(X))
    Z = scaler.transform(X)
    targets = engine.Targets.classes(ids, n_classes, class_weight)
    return engine.fit_linear(engine.MemoryRows(Z.copy()), targets, C, tol=TIGHT, **kwargs), Z


@pytest.mark.parametrize("classes, class_weight", [(2, None), (2, "balanced"), (4, None), (5, "balanced")])
def test_logistic_regression_matches_scikit_learn(classes, class_weight):
    X, y = overlapping(400, 12, classes)
    if class_weight:  # a rare class: 12 rows of 400
        y = np.where(np.arange(len(y)) % 33 == 0, classes - 1, y % (classes - 1))
    solution, Z = engine_fit(X, y, classes, 0.3, class_weight)
    scaler, lr = reference(X, y, 0.3, class_weight)
    assert solution.converged
    assert solution.coef.shape == lr.coef_.shape == ((1 if classes == 2 else classes), 12)
    np.testing.assert_allclose(solution.coef, lr.coef_, atol=1e-3)
    np.testing.assert_allclose(solution.intercept, lr.intercept_, atol=1e-3)
    head = LogisticHead(solution.coef, solution.intercept, np.arange(classes), 0.3)
    np.testing.assert_allclose(head.predict_proba(Z), lr.predict_proba(scaler.transform(X)), atol=1e-4)
    assert (head.predict(Z) == lr.predict(scaler.transform(X))).mean() > 0.995


def test_fit_probe_scores_as_scikit_learn_does_at_the_default_tolerance():
    """fit_probe (tol 1e-4, scikit-learn's default) on held-out rows: the same predictions but for a rare
    borderline row, probabilities within a few thousandths."""
    X, y = overlapping(1200, 20, 3, seed=1)
    ours = probe_fit.fit_probe(X[:900], y[:900], C=1.0)
    scaler, lr = reference(X[:900], y[:900], 1.0)
    Z = scaler.transform(X[900:])
    assert (ours.predict(X[900:]) == lr.predict(Z)).mean() >= 0.99
    np.testing.assert_allclose(ours.predict_proba(X[900:]), lr.predict_proba(Z), atol=5e-3)
    np.testing.assert_allclose(ours.scaler.mean_, scaler.mean_, rtol=1e-9)
    np.testing.assert_allclose(ours.scaler.scale_, scaler.scale_, rtol=1e-9)


def test_the_standardiser_is_scikit_learns_across_chunks_and_blocks(tmp_path):
    """`standardizer_of` merges float64 moments of MOMENT_ROWS-row chunks: StandardScaler's mean and scale to 1e-10
    on features far from zero (where one-pass sums lose digits), a constant feature scale 1, blocks that split
    chunks unevenly, and a read-only memory map as the word stores give it."""
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(21)
    n = 2 * engine.MOMENT_ROWS + 777
    X = (rng.normal(size=(n, 6)) * [1e-3, 1, 10, 1, 0.5, 2] + [1e4, 0, -50, 3, 7, 0]).astype(np.float32)
    X[:, 3] = 3.0
    path = tmp_path / "rows.npy"
    np.save(path, X)
    stored = np.load(path, mmap_mode="r")
    reference = StandardScaler().fit(X)
    for blocks in (engine.array_blocks(X), engine.array_blocks(stored, 1000), [X[:5], X[5:]]):
        ours = engine.standardizer_of(blocks)
        np.testing.assert_allclose(ours.mean_, reference.mean_, rtol=1e-10)
        np.testing.assert_allclose(ours.scale_, reference.scale_, rtol=1e-10)
        assert ours.scale_[3] == 1.0 and ours.n_samples_seen_ == n


def test_one_vs_rest_tags_match_scikit_learn_and_keep_a_constant_tag():
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.preprocessing import StandardScaler

    X, _ = overlapping(300, 8, 2, seed=2)
    rng = np.random.default_rng(3)
    Y = (X[:, :3] + rng.normal(scale=2.0, size=(300, 3)) > X[:, :3].mean(axis=0)).astype(np.int64)
    Y = np.concatenate([Y, np.ones((300, 1), dtype=np.int64)], axis=1)  # a tag every row has
    scaler = StandardScaler().fit(X)
    with probe_fit.constant_tags_allowed():
        ovr = OneVsRestClassifier(LogisticRegression(C=0.5, tol=1e-10, max_iter=10000)).fit(scaler.transform(X), Y)
    ours = probe_fit.fit_probe(X, Y, task="multi_label", C=0.5)
    np.testing.assert_allclose(ours.predict_proba(X), ovr.predict_proba(scaler.transform(X)), atol=2e-3)
    assert ours.predict_proba(X)[:, -1].min() == 1.0
    for est, ref in zip(ours.classifier.estimators_[:3], ovr.estimators_[:3], strict=True):
        np.testing.assert_allclose(est.coef_, ref.coef_, atol=5e-3)


def test_ridge_matches_scikit_learn():
    from sklearn.linear_model import Ridge
    from sklearn.preprocessing import StandardScaler

    X, _ = overlapping(200, 10, 2, seed=4)
    y = X @ np.random.default_rng(5).normal(size=10) + 3.0
    ours = probe_fit.fit_probe(X, y, task="regression", C=0.1)
    scaler = StandardScaler().fit(X)
    ridge = Ridge(alpha=10.0).fit(scaler.transform(X).astype(np.float64), y)
    np.testing.assert_allclose(ours.classifier.coef_, ridge.coef_, rtol=1e-4, atol=1e-5)
    assert ours.classifier.intercept_ == pytest.approx(ridge.intercept_, rel=1e-6)
    np.testing.assert_allclose(ours.predict(X), ridge.predict(scaler.transform(X).astype(np.float64)), atol=1e-4)


def test_warm_starts_reach_the_same_optimum():
    X, y = overlapping(500, 10, 3, seed=6)
    cold, _ = engine_fit(X, y, 3, 1.0)
    other, _ = engine_fit(X, (y + 1) % 3, 3, 0.01)  # a far-off start: another problem's solution
    warm, _ = engine_fit(X, y, 3, 1.0, init=other)
    np.testing.assert_allclose(warm.coef, cold.coef, atol=2e-4)
    assert warm.objective == pytest.approx(cold.objective, abs=1e-7)
    near, _ = engine_fit(X, y, 3, 1.2, init=cold)  # a neighbouring C: few iterations
    assert near.n_iter < cold.n_iter


def test_blocks_and_streamed_rows_give_the_full_batch_solution():
    X, y = overlapping(700, 9, 4, seed=7)
    scaler = engine.standardizer_of(engine.array_blocks(X, 64))
    Z = scaler.transform(X)
    targets = engine.Targets.classes(y, 4)
    full = engine.fit_linear(engine.MemoryRows(Z.copy(), block_rows=700), targets, 1.0, tol=TIGHT)
    blocked = engine.fit_linear(engine.MemoryRows(Z.copy(), block_rows=50), targets, 1.0, tol=TIGHT)
    streamed = engine.fit_linear(engine.StreamedRows(lambda a, b: X[a:b], 700, scaler, block_rows=50), targets, 1.0,
                                 tol=TIGHT)
    np.testing.assert_allclose(blocked.coef, full.coef, atol=1e-4)  # other sums, the same optimum
    np.testing.assert_allclose(streamed.coef, blocked.coef, atol=1e-4)  # standardised in float32, block by block
    assert streamed.objective == pytest.approx(full.objective, abs=1e-6)


def test_the_fit_is_deterministic_in_float32():
    X, y = overlapping(600, 16, 5, seed=8)
    first, _ = engine_fit(X, y, 5, 1.0)
    second, _ = engine_fit(X, y, 5, 1.0)
    assert first.coef.dtype == np.float64 and np.array_equal(first.coef, second.coef)
    assert np.array_equal(first.intercept, second.intercept) and first.n_iter == second.n_iter
    assert np.array_equal(first.coef, first.coef.astype(np.float32))  # the float32 solution, widened


def test_small_and_large_thread_counts_agree():
    X, y = overlapping(400, 8, 3, seed=9)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one, _ = engine_fit(X, y, 3, 1.0)
    finally:
        torch.set_num_threads(threads)
    many, _ = engine_fit(X, y, 3, 1.0)
    np.testing.assert_allclose(one.coef, many.coef, atol=1e-4)


def test_standardizer_is_standard_scalers():
    from sklearn.preprocessing import StandardScaler

    X, _ = overlapping(300, 6, 2, seed=10)
    X[:, 2] = 7.25  # a constant feature: scale 1
    ours = engine.standardizer_of(engine.array_blocks(X, 37))
    ref = StandardScaler().fit(X)
    np.testing.assert_allclose(ours.mean_, ref.mean_, rtol=1e-12)
    np.testing.assert_allclose(ours.scale_, ref.scale_, rtol=1e-10)
    assert ours.scale_[2] == 1.0 and ours.n_samples_seen_ == 300
    np.testing.assert_allclose(ours.transform(X), ref.transform(X), atol=1e-5)


def test_folds_are_scikit_learns():
    from sklearn.model_selection import KFold, StratifiedKFold

    y = np.array([2, 0, 1, 1, 0, 2, 2, 2, 1, 0, 0, 1, 2, 0, 1, 1, 2, 0, 2, 2, 1])
    for (tr, te), (ref_tr, ref_te) in zip(folds_cv.stratified_folds(y, 3), StratifiedKFold(3).split(y, y),
                                          strict=True):
        assert tr.tolist() == ref_tr.tolist() and te.tolist() == ref_te.tolist()
    for (tr, te), (ref_tr, ref_te) in zip(folds_cv.plain_folds(23, 4), KFold(4).split(np.zeros(23)), strict=True):
        assert tr.tolist() == ref_tr.tolist() and te.tolist() == ref_te.tolist()


def test_cv_path_log_loss_matches_scikit_learn_per_fold():
    """The warm-started C path gives each fold's log-loss as a cold scikit-learn fit at that C does."""
    from sklearn.metrics import log_loss

    X, y = overlapping(240, 8, 3, seed=11)
    grid = [0.01, 0.1, 1.0]
    folds = folds_cv.stratified_folds(y, 3)
    _, losses = folds_cv.logistic_path_scores(X, y, 3, grid, folds, None)
    for k, (tr, te) in enumerate(folds):
        for i, C in enumerate(grid):
            scaler, lr = reference(X[tr], y[tr], C)
            expected = log_loss(y[te], lr.predict_proba(scaler.transform(X[te])))
            assert losses[k, i] == pytest.approx(expected, abs=5e-4)  # the path stops at tol 1e-4, as lbfgs does


def test_a_narrow_heads_products_at_sixteen_columns_are_its_own():
    """Blocks with 2-15 output columns, big or small, are computed at WIDE columns (zero-padded weights and
    residuals): the logits and the gradient share of their own width, to float32 rounding; one column and 16 keep
    their width."""
    from bertkit.probe import products

    g = torch.Generator().manual_seed(0)
    for k in (2, 7, 15):
        for n in (50, products.SMALL_PASS // (64 * k) + 1):
            Z, W, b, R = (torch.randn(*shape, generator=g) for shape in ((n, 64), (64, k), (k,), (n, k)))
            assert products.wide(k)
            logits = products.logits_of(Z, W, b, products.widened(W, b))
            assert logits.shape == (n, k)
            torch.testing.assert_close(logits.double(), Z.double() @ W.double() + b.double(), rtol=1e-4, atol=1e-3)
            gW = torch.zeros(64, k)
            products.add_gradient(gW, Z, R)
            torch.testing.assert_close(gW.double(), Z.double().T @ R.double(), rtol=1e-4, atol=1e-2)
    assert not products.wide(1) and not products.wide(16) and products.wide(2)


def test_a_fit_at_sixteen_columns_reaches_the_optimum_of_its_own_width(monkeypatch):
    """A 7-class fit on one block of 60,000 x 40 rows (computed at 16 columns: `products.wide`) reaches the solution
    the same fit computed at its own width reaches."""
    from bertkit.probe import products

    X, y = overlapping(60_000, 40, 7, seed=13, offset=1.0)
    Z = engine.standardizer_of(engine.array_blocks(X)).transform(X).astype(np.float32)
    rows, targets = engine.MemoryRows(np.ascontiguousarray(Z)), engine.Targets.classes(y, 7)
    assert products.wide(7)
    padded = engine.fit_linear(rows, targets, 1.0)
    monkeypatch.setattr(products, "WIDE", 2)  # no width below 2: every product at its own width
    own = engine.fit_linear(rows, targets, 1.0)
    assert padded.converged and own.converged
    np.testing.assert_allclose(padded.coef, own.coef, atol=2e-3)
    assert abs(padded.objective - own.objective) < 1e-6


def test_saved_arrays_have_the_layout_scikit_learn_fits_had(tmp_path):
    """probe.safetensors holds the same arrays, dtypes and shapes for an engine fit as for a scikit-learn one."""
    from safetensors.numpy import load_file

    from bertkit.data.labels import LabelMap
    from bertkit.probe import saved as probe_io

    X, y = overlapping(150, 6, 3, seed=12)
    probe_io.save_probe(tmp_path, probe_fit.fit_probe(X, y), LabelMap.build(["a", "b", "c"]),
                        {"model": "m", "pool": "cls", "layers": "-1"})
    arrays = load_file(str(tmp_path / probe_io.PROBE_WEIGHTS))
    scaler, lr = reference(X, y, 1.0)
    expected = {"scaler_mean": scaler.mean_, "scaler_scale": scaler.scale_, "coef": lr.coef_,
                "intercept": lr.intercept_, "classes": lr.classes_}
    assert sorted(arrays) == sorted(expected)
    for name, value in expected.items():
        assert arrays[name].shape == value.shape
        assert arrays[name].dtype == (np.int64 if name == "classes" else np.float64)
    np.testing.assert_allclose(arrays["coef"], lr.coef_, atol=5e-3)


def correlated(n: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Binary labels on features that share a few strong directions, as an encoder layer's do (after
    standardisation most of the variance lies in a handful of directions)."""
    rng = np.random.default_rng(seed)
    shared = rng.normal(size=(n, 3)) @ rng.normal(size=(3, d)) * 4.0
    X = (shared + rng.normal(size=(n, d))).astype(np.float32)
    y = (X @ rng.normal(size=d) + 2.0 * rng.normal(size=n) > 0).astype(np.int64)
    return X, y


def hessian_at_zero(rows, targets, C: float) -> np.ndarray:
    """The objective's Hessian at zero weights, column by column from central differences of its gradient (exact
    for a quadratic; the logistic loss is smooth enough at this step), in the flat layout `fit_head` uses."""
    d, k = rows.d, targets.n_outputs

    def gradient(x: torch.Tensor) -> np.ndarray:
        _, gW, gb = engine.loss_and_gradient(rows, targets, x[:d * k].reshape(d, k).float(), x[d * k:].float(), C)
        return torch.cat([gW.reshape(-1), gb]).double().numpy()

    size, step = d * k + k, 1e-2
    columns = []
    for j in range(size):
        e = torch.zeros(size, dtype=torch.float64)
        e[j] = step
        columns.append((gradient(e) - gradient(-e)) / (2 * step))
    return np.stack(columns, axis=1)


def test_curvature_is_the_sigmoid_hessian_at_zero_weights():
    """For a sigmoid head the estimate L-BFGS starts from is the objective's Hessian at zero weights: applied to
    that Hessian it gives back the identity (each output column its own problem, so a block-diagonal Hessian)."""
    X, y = overlapping(600, 6, 2)
    Y = np.stack([y, 1 - y * (np.arange(600) % 2)], axis=1).astype(np.float32)
    scaler = engine.standardizer_of(engine.array_blocks(X))
    rows, targets, C = engine.MemoryRows(scaler.transform(X)), engine.Targets.columns(Y), 0.5
    H = hessian_at_zero(rows, targets, C)
    curvature = engine.Curvature.of(engine.loss_curvature(rows, targets), 1.0 / (C * targets.total))
    inverse_times_H = np.stack([curvature.apply(torch.from_numpy(H[:, j].copy())).numpy() for j in range(len(H))], 1)
    np.testing.assert_allclose(inverse_times_H, np.eye(len(H)), atol=1e-3)


def test_curvature_of_streamed_rows_and_sample_weights():
    """Streamed rows (standardised block by block) give the curvature rows in memory give; balanced class weights
    weigh each row's share; a subsample of every r-th row (when there are many rows) stays close to all rows'."""
    X, y = correlated(900, 5)
    scaler = engine.standardizer_of(engine.array_blocks(X))
    memory = engine.MemoryRows(scaler.transform(X), block_rows=128)
    streamed = engine.StreamedRows(lambda a, b: X[a:b], len(X), scaler, block_rows=100)
    for class_weight in (None, "balanced"):
        targets = engine.Targets.classes(np.where(np.arange(900) % 9 == 0, 2, y), 3, class_weight)
        np.testing.assert_allclose(engine.loss_curvature(streamed, targets).numpy(),
                                   engine.loss_curvature(memory, targets).numpy(), atol=1e-5)
    targets = engine.Targets.classes(y, 2)
    Z1 = np.hstack([scaler.transform(X), np.ones((900, 1), np.float32)]).astype(np.float64)
    np.testing.assert_allclose(engine.loss_curvature(memory, targets).numpy(), 0.25 * Z1.T @ Z1 / 900, atol=1e-5)
    sampled = engine.loss_curvature(memory, targets, max_rows=300).numpy()  # every 3rd row (16 per feature: 96)
    np.testing.assert_allclose(sampled, 0.25 * Z1[::3].T @ Z1[::3] / 300, atol=1e-5)


def test_starting_from_the_curvature_needs_far_fewer_iterations_to_the_same_optimum():
    """On correlated features plain L-BFGS (a scaled identity to start) spends its iterations learning the
    correlation; started from the curvature at zero weights it reaches the same optimum in a fraction of them."""
    X, y = correlated(2000, 40)
    scaler = engine.standardizer_of(engine.array_blocks(X))
    rows, targets, C = engine.MemoryRows(scaler.transform(X)), engine.Targets.classes(y, 2), 10.0
    started = engine.fit_linear(rows, targets, C, tol=TIGHT)
    plain = engine.fit_head(rows.n, rows.d, 1, lambda W, b: engine.loss_and_gradient(rows, targets, W, b, C),
                            tol=TIGHT)
    assert started.converged and plain.converged
    np.testing.assert_allclose(started.coef, plain.coef, atol=1e-3)
    assert started.n_iter * 3 <= plain.n_iter, (started.n_iter, plain.n_iter)


def test_curvature_is_the_softmax_hessians_diagonal_blocks_at_zero_weights():
    """For a softmax head the estimate is each class's own block of the Hessian at zero weights (the classes'
    coupling, -p_j p_k, left out): w0 = p (1 - p) at p = 1 / classes, the penalty on the weights only."""
    X, y = overlapping(500, 4, 3)
    scaler = engine.standardizer_of(engine.array_blocks(X))
    rows, targets, C = engine.MemoryRows(scaler.transform(X)), engine.Targets.classes(y, 3), 2.0
    H = hessian_at_zero(rows, targets, C)
    estimate = engine.loss_curvature(rows, targets).numpy().copy()
    estimate[np.arange(4), np.arange(4)] += 1.0 / (C * targets.total)
    for j in range(3):
        block = [i * 3 + j for i in range(4)] + [4 * 3 + j]
        np.testing.assert_allclose(H[np.ix_(block, block)], estimate, atol=2e-4)


def test_first_scale_is_the_curvature_measured_along_the_step():
    """On a quadratic whose Hessian is c times P^-1 (P the first estimate), s.y / y.P y of any step is 1 / c:
    the factor that makes P the exact inverse Hessian."""
    from bertkit.probe.lbfgs import first_scale

    rng = np.random.default_rng(0)
    M = rng.normal(size=(6, 6))
    P = torch.from_numpy(M @ M.T + 6 * np.eye(6))
    for c in (0.01, 1.0, 50.0):
        A = c * torch.linalg.inv(P)
        s = torch.from_numpy(rng.normal(size=6))
        assert first_scale(s, A @ s, lambda v: P @ v) == pytest.approx(1.0 / c, rel=1e-9)


def quadratic_from(P: torch.Tensor, c: float, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """A quadratic's Hessian c P^-1/2 E P^-1/2 (E: eigenvalues 0.2-5 on random axes: P has the Hessian's scale 1 / c
    off and its shape only roughly right, as the curvature at zero weights is for a fit far from zero) and its
    linear term."""
    rng = np.random.default_rng(seed)
    n = P.shape[0]
    w, U = np.linalg.eigh(P.numpy())
    root = U @ np.diag(w ** -0.5) @ U.T
    Q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    E = Q @ np.diag(rng.uniform(0.2, 5.0, n)) @ Q.T
    return torch.from_numpy(c * root @ E @ root), torch.from_numpy(rng.normal(size=n))


def iterations_on_quadratic(c: float) -> int:
    from bertkit.probe.lbfgs import minimize_lbfgs

    rng = np.random.default_rng(0)
    M = rng.normal(size=(60, 60))
    P = torch.from_numpy(M @ M.T / 60 + np.eye(60))
    A, b = quadratic_from(P, c)
    x, _, n_iter, converged = minimize_lbfgs(lambda x: (float(0.5 * x @ A @ x - b @ x), A @ x - b),
                                             torch.zeros(60, dtype=torch.float64), tol=1e-8, history=5,
                                             precondition=lambda v: P @ v)
    assert converged
    np.testing.assert_allclose(x.numpy(), torch.linalg.solve(A, b).numpy(), rtol=1e-5, atol=1e-6)
    return n_iter


def test_a_first_estimate_off_by_a_factor_costs_no_iterations(monkeypatch):
    """L-BFGS scales its first estimate P at every iteration, as it scales the identity: a quadratic whose curvature
    is 100 times below P's (nearly separable tags, where the probabilities saturate) or 100 times above is solved in
    about as many iterations as one at P's own scale; P left unscaled, the first takes several times more."""
    from bertkit.probe import lbfgs

    at_scale = iterations_on_quadratic(1.0)
    below, above = iterations_on_quadratic(0.01), iterations_on_quadratic(100.0)
    assert below <= 1.25 * at_scale and above <= 1.25 * at_scale, (at_scale, below, above)
    monkeypatch.setattr(lbfgs, "first_scale", lambda s, y, precondition: 1.0)
    assert iterations_on_quadratic(0.01) >= 3 * below
