"""The released policy spec (``attention_style="released"``) of the full game's config."""

import dataclasses
import pathlib
import tomllib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import entity_network, networks, ppo
from jaxsrl.core.agent import EnvSpec, Trajectory
from jaxsrl.envs import env_spaces

REPO = pathlib.Path(__file__).resolve().parents[2]
SPEC = EnvSpec(*env_spaces("hide_and_seek_full"))
N = 4


def _released_config(**kw) -> ppo.PPOConfig:
    """PPOConfig from the [ppo] table of configs/hide_and_seek_full.toml (plus ``kw``)."""
    with open(REPO / "configs" / "hide_and_seek_full.toml", "rb") as f:
        table = tomllib.load(f)["ppo"]
    table["hidden_sizes"] = tuple(table["hidden_sizes"])
    return dataclasses.replace(ppo.PPOConfig(**table), **kw)


def _net(cfg):
    return entity_network.from_config(networks.head_for_space(SPEC.action_space), cfg)


@pytest.fixture(scope="module")
def released():
    net = _net(_released_config())
    variables = net.init(jax.random.PRNGKey(0), _obs(0), net.initial_carry(N), jnp.zeros((N,), bool))
    return net, variables


def _obs(seed, lead=(N,)):
    rng = np.random.default_rng(seed)
    out = {}
    for key, space in SPEC.observation_space.spaces.items():
        if key.endswith("_mask") or key.endswith("_present"):
            out[key] = np.ones(lead + space.shape, np.float32)
        else:
            out[key] = rng.normal(size=lead + space.shape).astype(np.float32)
    return out


def _apply(net, variables, obs, **kw):
    dist, value, carry = net.apply(variables, obs, net.initial_carry(N), jnp.zeros((N,), bool), **kw)
    return np.asarray(dist.logits), np.asarray(value), carry


def test_the_full_config_asks_for_the_released_spec():
    cfg = _released_config()
    cfg.validate()
    assert (cfg.attention_style, cfg.entity_embed, cfg.attention_heads, cfg.dense_size, cfg.lstm_size,
            cfg.lidar_filters, cfg.lidar_to_entities) == ("released", 128, 4, 256, 256, 9, True)
    assert ppo.PPOConfig().attention_style == "ours"  # the default keeps the quadrant network


def test_parameter_count_matches_the_spec_by_hand(released):
    _, variables = released
    dims = {k: s.shape for k, s in SPEC.observation_space.spaces.items()}
    ds, L = dims["self"][0], dims["lidar"][0]
    E, heads, D, H, F = 128, 4, 256, 256, 9  # the released spec
    dense = lambda i, o: i * o + o
    ln = lambda d: 2 * d
    self_in = ds + L * F  # lidar conv flattened into the self features
    torso = (3 * 1 * F + F                                  # circular conv, kernel 3
             + dense(self_in, E)                             # self embedding
             + sum(dense(self_in + dims[k][1], E) for k in entity_network.ENTITY_KINDS)
             + ln(E) + 3 * dense(E, E) + dense(E, E) + ln(E)  # pre-LN, q k v, output, post-LN
             + ln(2 * E) + dense(2 * E, D) + ln(D))          # LN, dense 256, LN
    lstm = 4 * (D * H + H * H + H)  # BasicLSTMCell: kernel [D + H, 4H] + bias
    n_logits = int(sum(SPEC.action_space.nvec))
    expected = 2 * (torso + lstm + ln(H)) + dense(H, n_logits) + dense(H, 1)
    got = sum(x.size for x in jax.tree.leaves(variables))
    assert got == expected == 1_626_222
    p = variables["params"]
    assert p["pi_torso"]["self_attention"]["query"]["kernel"].shape == (E, heads, E // heads)
    assert "Dense_0" not in p["pi_torso"]  # no feed-forward block
    assert p["pi_core"]["hi"]["kernel"].shape == (D, H)


def test_shapes_and_carry(released):
    net, variables = released
    logits, value, carry = _apply(net, variables, _obs(1))
    nvec = SPEC.action_space.nvec
    assert logits.shape == (N, len(nvec), nvec.max()) and value.shape == (N,)
    assert jax.tree.map(lambda x: x.shape, carry) == (((N, 256), (N, 256)), ((N, 256), (N, 256)))
    assert np.isfinite(value).all()


def _entity_tokens(net, variables, obs):
    """Outputs of every ``embed_<kind>`` layer of the policy torso: {kind: [N, K, E]}."""
    _, state = net.apply(variables, obs, net.initial_carry(N), jnp.zeros((N,), bool),
                         capture_intermediates=lambda m, _: m.name and m.name.startswith("embed_"))
    inter = state["intermediates"]["pi_torso"]
    return {k: np.asarray(inter[f"embed_{k}"]["__call__"][0]) for k in entity_network.ENTITY_KINDS}


@pytest.mark.parametrize("to_entities", [True, False])
def test_lidar_reaches_every_entity_token_only_when_routed_there(to_entities):
    net = _net(_released_config(lidar_to_entities=to_entities))
    obs = _obs(2)
    variables = net.init(jax.random.PRNGKey(1), obs, net.initial_carry(N), jnp.zeros((N,), bool))
    before = _entity_tokens(net, variables, obs)
    after = _entity_tokens(net, variables, {**obs, "lidar": obs["lidar"] + 1.0})
    for kind in entity_network.ENTITY_KINDS:
        moved = np.abs(after[kind] - before[kind]).max(axis=-1)  # [N, K]: per token
        if to_entities:
            assert (moved > 1e-4).all(), kind  # every token of every row
        else:
            assert moved.max() == 0.0, kind


def test_masks_hide_invisible_and_padded_entities(released):
    net, variables = released
    obs = _obs(3)
    obs["boxes_mask"][:, 0] = 0  # real, not visible: hidden from the policy only
    obs["ramps_present"][:, 1] = obs["ramps_mask"][:, 1] = 0  # padding: hidden from both
    logits, value, _ = _apply(net, variables, obs)
    seen = {k: v.copy() for k, v in obs.items()}
    seen["boxes"][:, 0] += 5.0
    logits2, value2, _ = _apply(net, variables, seen)
    np.testing.assert_allclose(logits2, logits, rtol=1e-5, atol=1e-5)
    assert np.abs(value2 - value).max() > 1e-4  # the omniscient value sees the box
    padded = {k: v.copy() for k, v in obs.items()}
    padded["ramps"][:, 1] = 100.0
    logits3, value3, _ = _apply(net, variables, padded)
    np.testing.assert_allclose(logits3, logits, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(value3, value, rtol=1e-5, atol=1e-5)
    visible = {k: v.copy() for k, v in obs.items()}
    visible["boxes"][:, 1] += 5.0  # a visible box does move the policy
    assert np.abs(_apply(net, variables, visible)[0] - logits).max() > 1e-4


def test_recurrent_learn_step_runs_with_the_released_spec():
    cfg = _released_config(num_epochs=1, num_minibatches=1, learning_rate=1e-3)
    fns = ppo.make(cfg, SPEC, 10)
    state = jax.jit(fns.init)(jax.random.PRNGKey(0))
    B, T = 2, 3
    r = np.random.default_rng(0)
    spaces = SPEC.observation_space.spaces
    obs = {k: r.random((B, T + 1) + s.shape).astype(np.float32) for k, s in spaces.items()}
    fin = {k: r.random((B, T) + s.shape).astype(np.float32) for k, s in spaces.items()}
    trunc = np.zeros((B, T), bool)
    trunc[0, 1] = True
    traj = Trajectory(obs=obs, action=r.integers(0, 2, (B, T, 5)).astype(np.int32),
                      reward=r.normal(size=(B, T)).astype(np.float32),
                      terminated=np.zeros((B, T), bool), truncated=trunc, final_obs=fin,
                      behaviour_logp=np.full((B, T), -8.0, np.float32),
                      policy_version=np.zeros((B, T), np.int32), carry=fns.initial_carry(B))
    new, metrics = jax.jit(fns.learn)(state, traj, jax.random.PRNGKey(1))
    assert all(np.isfinite(np.asarray(v)).all() for v in metrics.values())
    moved = max(float(np.abs(a - b).max()) for a, b in
                zip(jax.tree.leaves(new.params["net"]), jax.tree.leaves(state.params["net"])))
    assert moved > 1e-6
    action, carry, _ = jax.jit(fns.act)(new.params, jax.tree.map(lambda x: x[:, 0], obs),
                                        fns.initial_carry(B), jax.random.PRNGKey(2))
    assert action.shape == (B, 5) and carry[0][0].shape == (B, 256)
