from controller.core.placement import is_spread, minimum_nodes, place


def test_single_node_best_fit_keeps_big_holes():
    assert place(2, {"a": 8, "b": 3, "c": 2}, consolidate=False, max_gpus_per_node=8) == (("c", 2),)


def test_consolidated_gang_takes_fewest_nodes_or_waits():
    free = {"a": 4, "b": 4, "c": 2, "d": 2}
    assert place(8, free, consolidate=True, max_gpus_per_node=4) == (("a", 4), ("b", 4))
    # 8 GPUs free in all but only across 3+ nodes: a sensitive job waits
    assert place(8, {"a": 4, "b": 2, "c": 2}, consolidate=True, max_gpus_per_node=4) is None


def test_insensitive_gang_soaks_up_fragments():
    slots = place(8, {"a": 4, "b": 2, "c": 2, "d": 4}, consolidate=False, max_gpus_per_node=4)
    assert sum(g for _, g in slots) == 8
    assert dict(slots) == {"b": 2, "c": 2, "a": 4}  # fragments first, then the fuller node


def test_not_enough_gpus():
    assert place(5, {"a": 2, "b": 2}, consolidate=False, max_gpus_per_node=4) is None


def test_spread_detection():
    assert minimum_nodes(8, 4) == 2
    assert is_spread((("a", 4), ("b", 2), ("c", 2)), 8, 4)
    assert not is_spread((("a", 4), ("b", 4)), 8, 4)
