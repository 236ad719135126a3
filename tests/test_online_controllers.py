"""The online controllers against direct re-implementations of their papers' updates, on fixed losses,
and a pipeline steered by one."""

from __future__ import annotations

import math
import re

import jax.numpy as jnp
import numpy as np
import pytest

from jaxdata import Pipeline
from jaxdata.research.mixing import doremi_update, per_source_loss
from jaxdata.research.online import DoReMiController, EXP3Controller, ReplayController, per_source_excess_loss
from pipeline_fixtures import coded_config

DOMAINS = ("web", "code", "books")


def test_doremi_follows_the_papers_update_and_averages_its_steps():
  rng = np.random.default_rng(0)
  controller = DoReMiController(DOMAINS)
  weights = np.full(3, 1 / 3)
  history = []
  for step in range(60):
    excess = rng.gamma(1.0, 0.5, 3)
    got = controller.observe(step, dict(zip(DOMAINS, excess)))
    # Xie et al. (2023), Algorithm 1: exponentiated gradient, then smoothing toward uniform (eta 0.1, c 1e-3)
    raised = weights * np.exp(0.1 * excess)
    weights = (1 - 1e-3) * raised / raised.sum() + 1e-3 / 3
    history.append(weights)
    assert np.allclose([got[d] for d in DOMAINS], weights, rtol=0, atol=1e-12)
  average = np.mean(history, axis=0)
  assert np.allclose([controller.averaged()[d] for d in DOMAINS], average / average.sum(), atol=1e-12)
  # and it agrees with the offline round on per-token losses whose clipped excess has those means
  one = DoReMiController(DOMAINS).observe(0, {"web": 0.5, "code": 0.0, "books": 1.5})
  offline = doremi_update(
    dict.fromkeys(DOMAINS, 1 / 3),
    {"web": [1.5], "code": [0.2], "books": [2.5]},
    {"web": [1.0], "code": [0.4], "books": [1.0]},
  )
  assert all(math.isclose(one[d], offline[d], abs_tol=1e-12) for d in DOMAINS)


def test_exp3_follows_odms_update():
  rng = np.random.default_rng(1)
  k, alpha = 3, 0.9
  controller = EXP3Controller(DOMAINS, alpha=alpha)
  rewards = np.zeros(k)

  def eps(t: int) -> float:
    return min(1 / k, math.sqrt(math.log(k) / (k * t)))

  def policy(t: int) -> np.ndarray:  # pi_t with eps_t, from rewards scaled by eps_(t-1) (eps_0 := eps_1)
    scores = np.exp(eps(max(t - 1, 1)) * rewards - np.max(eps(max(t - 1, 1)) * rewards))
    return (1 - k * eps(t)) * scores / scores.sum() + eps(t)

  pi = policy(1)
  for t in range(1, 80):
    present = rng.random(k) < 0.8
    losses = rng.gamma(2.0, 1.0, k)
    observed = {d: float(losses[i]) for i, d in enumerate(DOMAINS) if present[i]}
    got = controller.observe(t - 1, observed)
    rewards = np.where(present, alpha * rewards + (1 - alpha) * losses / pi, rewards)
    pi = policy(t + 1)
    assert np.allclose([got[d] for d in DOMAINS], pi, rtol=0, atol=1e-12)
    assert math.isclose(sum(got.values()), 1.0, abs_tol=1e-12) and min(got.values()) >= eps(t + 1) - 1e-15


def test_replay_hands_back_the_recorded_trajectory_and_refuses_a_broken_one():
  replay = ReplayController([(0, {"a": 1}), (5, {"a": 2}), (9, {"a": 3})])
  assert [replay.observe(s, {})["a"] for s in (0, 4, 5, 8, 9, 100)] == [1, 1, 2, 2, 3, 3]
  with pytest.raises(ValueError, match=r"trajectory: steps must rise from 0"):
    ReplayController([(3, {"a": 1})])


def test_the_excess_loss_helper_clips_per_token_then_averages_per_source():
  rng = np.random.default_rng(2)
  loss, reference = rng.gamma(2.0, 1.0, (4, 16)), rng.gamma(2.0, 1.0, (4, 16))
  sources = rng.integers(-1, 3, (4, 16))  # -1: padding
  mask = (rng.random((4, 16)) < 0.9) & (sources >= 0)
  means, counts = per_source_excess_loss(
    jnp.asarray(loss), jnp.asarray(reference), jnp.asarray(sources), jnp.asarray(mask), num_sources=3
  )
  for s in range(3):
    chosen = (sources == s) & mask
    assert int(counts[s]) == int(chosen.sum())
    assert math.isclose(float(means[s]), float(np.maximum(loss - reference, 0)[chosen].mean()), rel_tol=1e-5)
  with pytest.raises(ValueError, match=r"excess_loss: 'web' is nan; give every domain a finite number >= 0"):
    DoReMiController(DOMAINS).observe(0, {"web": float("nan"), "code": 0, "books": 0})


def test_a_pipeline_steered_by_doremi_moves_its_shares_toward_the_domain_with_excess_loss(tmp_path):
  rng = np.random.default_rng(4)
  cfg = coded_config(tmp_path, [rng.integers(1, 30, 400).tolist(), rng.integers(1, 30, 400).tolist()])
  raw_names = cfg.names
  controller = DoReMiController(raw_names, eta=1.0)
  with Pipeline(cfg, prefetch=0) as pipe:
    for step in range(40):
      next(pipe)
      pipe.update_mixture(controller.observe(step, {raw_names[0]: 1.0, raw_names[1]: 0.0}))
    share = pipe.stats()["share_batch"][raw_names[0]]
  assert controller.weights[0] > 0.99 and share > 0.9  # the loop's weights reached the batches


def test_hostile_inputs_change_nothing():
  exp3 = EXP3Controller(DOMAINS)
  before = exp3.rewards.copy()
  for bad in ({"web": 2.0, "code": -1.0}, {"web": float("inf")}, {"web": "2.0"}):
    with pytest.raises(ValueError, match=r"per_source_loss: "):
      exp3.observe(0, bad)
    assert np.array_equal(exp3.rewards, before)
  with pytest.raises(ValueError, match=r"domains: each a non-empty name, each once"):
    EXP3Controller(("a", "a", "b"))
  with pytest.raises(ValueError, match=r"initial: DoReMi's weights stay positive"):
    DoReMiController(DOMAINS, initial={"web": 1, "code": 0, "books": 1})
  with pytest.raises(ValueError, match=r"trajectory step 0: every value must be a finite number >= 0"):
    ReplayController([(0, {"a": float("nan"), "b": 1})])
  replay = ReplayController([(0, {"a": 1, "b": 1})])
  replay.observe(0, {})["a"] = 99
  assert replay.observe(0, {}) == {"a": 1, "b": 1}  # the record is not the caller's to change


def test_masked_nan_losses_do_not_reach_a_source():
  loss = jnp.array([[1.0, jnp.nan, 2.0, jnp.inf]])
  sources = jnp.array([[0, -1, 1, 0]])
  mask = jnp.array([[1, 1, 1, 0]])
  means, _ = per_source_loss(loss, sources, mask, num_sources=2)
  excess, _ = per_source_excess_loss(loss, jnp.zeros_like(loss), sources, mask, num_sources=2)
  assert means.tolist() == [1.0, 2.0] and excess.tolist() == [1.0, 2.0]


BAD_FEEDS = [
  ({"web": 1.0, "code": 1.0, "books": 1.0, "news": 1.0}, "unknown domain(s) ['news']"),
  ({"web": True, "code": 1.0, "books": 1.0}, "'web' is True"),
  ({"web": [1.0], "code": 1.0, "books": 1.0}, "'web' is [1.0]"),
  ({"web": -0.5, "code": 1.0, "books": 1.0}, "'web' is -0.5"),
  ({"web": float("inf"), "code": 1.0, "books": 1.0}, "'web' is inf"),
  ([1.0, 2.0, 3.0], "a mapping of domain"),
]


@pytest.mark.parametrize("feed, names", BAD_FEEDS, ids=[n for _, n in BAD_FEEDS])
def test_every_controller_checks_what_it_is_fed_the_same_way_and_changes_nothing(feed, names):
  doremi, exp3 = DoReMiController(DOMAINS), EXP3Controller(DOMAINS)
  before = (doremi.weights.copy(), list(doremi.history), exp3.rewards.copy(), exp3.pi.copy(), exp3.t)
  for controller in (doremi, exp3):
    with pytest.raises(ValueError, match=re.escape(names)):
      controller.observe(0, feed)
  after = (doremi.weights, doremi.history, exp3.rewards, exp3.pi, exp3.t)
  assert all(np.array_equal(a, b) for a, b in zip(before[:1] + before[2:4], after[:1] + after[2:4]))
  assert before[1] == after[1] and before[4] == after[4]


def test_controllers_never_return_a_non_finite_weight_and_refuse_empty_domains():
  doremi = DoReMiController(DOMAINS, eta=10)
  weights = doremi.observe(0, {"web": 1e308, "code": 0.0, "books": 1e200})
  assert all(np.isfinite(list(weights.values()))) and abs(sum(weights.values()) - 1) < 1e-12
  assert weights["web"] > 0.99  # the largest excess takes the weight, the smoothing floor keeps the rest
  exp3 = EXP3Controller(DOMAINS)
  for _ in range(50):
    pi = exp3.observe(0, {"web": 1e300, "code": 1e-300, "books": 0.0})
    assert all(np.isfinite(list(pi.values())))
  # a None excess is an error naming the domain for DoReMi (EXP3 reads None as "not in this batch")
  with pytest.raises(ValueError, match=r"excess_loss: 'web' is None"):
    doremi.observe(1, {"web": None, "code": 1.0, "books": 1.0})
  for make, least in ((DoReMiController, 1), (EXP3Controller, 2)):
    with pytest.raises(ValueError, match=rf"domains: .* needs at least {least}"):
      make([])
    with pytest.raises(ValueError, match=r"domains: a list of domain names"):
      make("web")
