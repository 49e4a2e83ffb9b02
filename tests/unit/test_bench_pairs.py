"""How the catch-up benchmark orders its runs and pairs them (tests/bench/bench_prefetch.py),
and what it builds into its cache (prefetch_setup.py)."""
import pytest
from tests.bench.bench_prefetch import Run, pair_ratios, pairs_plan
from tests.bench.prefetch_setup import BASE_VERSION, to_build


def run(workload: str, mode: str, seconds: float = 1.0) -> Run:
    return Run(workload, mode, seconds, 1, 0, None, [], None)


@pytest.mark.parametrize(("workloads", "bases", "rounds", "want"), [
    (["a"], ["cold"], 1, ["a:cold", "a:prefetch"]),
    (["a"], ["cold"], 3, ["a:cold", "a:prefetch", "a:prefetch", "a:cold", "a:cold", "a:prefetch"]),
    (["a", "b"], ["cold"], 2, ["a:cold", "a:prefetch", "b:cold", "b:prefetch",
                               "a:prefetch", "a:cold", "b:prefetch", "b:cold"]),
    (["a"], ["cold", "parallel"], 2, ["a:cold", "a:prefetch", "a:parallel", "a:parallel+pf",
                                      "a:prefetch", "a:cold", "a:parallel+pf", "a:parallel"]),
    (["a"], ["cold"], 0, []),
])
def test_pairs_plan_is_round_robin_and_alternates_order(workloads, bases, rounds, want):
    assert [f"{w}:{m}" for w, m in pairs_plan(workloads, bases, rounds)] == want


@pytest.mark.parametrize(("runs", "want"), [
    # cold first, lagd first, and both in one plan
    ([("a", "cold", 2), ("a", "prefetch", 1)], {"a": [(2, 1)]}),
    ([("a", "prefetch", 1), ("a", "cold", 2)], {"a": [(2, 1)]}),
    ([("a", "cold", 2), ("a", "prefetch", 1), ("a", "prefetch", 3), ("a", "cold", 4)],
     {"a": [(2, 1), (4, 3)]}),
    # two runs of one side: the newer one waits for the twin
    ([("a", "cold", 9), ("a", "cold", 2), ("a", "prefetch", 1)], {"a": [(2, 1)]}),
    # a run whose twin never came is left out; other workloads and modes do not pair across
    ([("a", "cold", 2), ("b", "prefetch", 1)], {}),
    ([("a", "parallel", 2), ("a", "prefetch", 1), ("a", "parallel+pf", 1)], {"a parallel": [(2, 1)]}),
    # runs of modes that have no twin are passed over
    ([("a", "cold", 2), ("a", "hot", 5), ("a", "prefetch", 1)], {"a": [(2, 1)]}),
])
def test_pair_ratios_pairs_each_run_with_its_neighbouring_twin(runs, want):
    got = pair_ratios([run(w, m, s) for w, m, s in runs])
    assert {k: [(c.seconds, p.seconds) for c, p in v] for k, v in got.items()} == want
    for pairs in got.values():
        for cold, pf in pairs:
            assert cold.mode in ("cold", "parallel") and pf.mode in ("prefetch", "parallel+pf")


@pytest.mark.parametrize(("cached", "wanted", "want"), [
    (None, ["update_pk"], ["update_pk"]),  # no cache yet
    ({"rows": 10, "changes": 5, "workloads": {"update_pk": {}, "insert": {}}, "base_version": BASE_VERSION},
     ["insert"], []),
    # one missing: all built again, the cached ones kept
    ({"rows": 10, "changes": 5, "workloads": {"update_pk": {}, "insert": {}}, "base_version": BASE_VERSION},
     ["delete", "insert"], ["update_pk", "insert", "delete"]),
    # another backlog length is another benchmark, and so is a base of another version
    ({"rows": 10, "changes": 6, "workloads": {"update_pk": {}}, "base_version": BASE_VERSION}, ["insert"],
     ["insert"]),
    ({"rows": 11, "changes": 5, "workloads": {"update_pk": {}}, "base_version": BASE_VERSION}, ["update_pk"],
     ["update_pk"]),
    ({"rows": 10, "changes": 5, "workloads": {"update_pk": {}}}, ["update_pk"], ["update_pk"]),
])
def test_a_cache_missing_a_workload_keeps_the_ones_it_held(cached, wanted, want):
    assert to_build(cached, 10, 5, wanted) == want
