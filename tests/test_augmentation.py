import numpy as np

from data_gen.augmentation import augment, doing_more_than_required
from data_gen.config import SyntheticDatasetConfig
from data_gen.dataset import build_dataset
from data_gen.encodings import set_keys
from envs.capability import CapabilityWorld
from solvers.setcover_fast import FastSetCover
from tests.brute import brute_force_covers


def test_doing_more_than_required_marks_redundant_capabilities():
    acts = np.array([[1, 1, 0], [0, 0, 1]], dtype=np.uint8)
    world = CapabilityWorld(acts, np.array([1.0, 1.0]), np.array([1, 1, 0]))
    X = np.array([[1, 0, 1]], dtype=np.uint8)  # holds 0 (provided again by a0) and 2 (not required)
    assert doing_more_than_required(world, X, np.array([[0, -1]]), None)[0].tolist() == [True, False, True]


def test_augments_keep_their_cfe_as_unique_optimum(tmp_path):
    ds = build_dataset(SyntheticDatasetConfig(n_features=8, n_actions=10, n_agents=2000, seed=2), tmp_path, "s",
                       progress=False)
    train, _ = ds.split("all")
    out, stats = augment(ds.world, train, per_agent=1, min_count=15, seed=0)
    assert stats["ag1_added"] > 0 and len(out) == len(train) + stats["ag1_added"] + stats["ag2_added"]
    new = np.arange(len(train), len(out))
    # worse off: each augment holds a strict subset of some training agent's capabilities
    assert not ds.world.accepts(out.X[new]).any()
    # brute force confirms the unique optimum is the inherited CFE
    for i in new[:40]:
        cost, optimal = brute_force_covers(ds.world, out.X[i])
        assert len(optimal) == 1 and optimal[0] == tuple(int(a) for a in out.sets[i] if a >= 0)
        assert np.isclose(cost, out.cost[i])
    lab = FastSetCover().label_batch(ds.world, out.X[new])
    assert (lab.n_optimal == 1).all()
    assert np.array_equal(set_keys(lab.actions[:, :3], 10), set_keys(out.sets[new], 10))
    # no augment duplicates a training agent or another augment
    packed = np.packbits(out.X, axis=1)
    assert len({r.tobytes() for r in packed[new]}) == len(new)
    assert not {r.tobytes() for r in packed[new]} & {r.tobytes() for r in np.packbits(train.X, axis=1)}
    if "ag2_rare_cfes_before" in stats:
        assert stats["ag2_rare_cfes_after"] <= stats["ag2_rare_cfes_before"]
