"""Why a pool waits: ``placement_wait_reason`` reads Ray's placement-group table and resource
totals (here as Ray returned them in a reproduction of a node rejoining at a dead node's address)."""

from grm.orchestrator.pool_wait import placement_wait_reason

WAITING = "ea1a29b0383f" + "0" * 24 + "06000000"
TRAIN = "29caf30531a7" + "0" * 24 + "06000000"
DEAD_JOB = "496c79e3ec4e" + "0" * 24 + "05000000"
NODE_A = "7c4bc853" + "a" * 48

TABLE = {
    WAITING: {
        "name": "grm-judge",
        "state": "PENDING",
        "stats": {"scheduling_state": "NO_RESOURCES", "scheduling_attempt": 31},
        "bundles": {0: {"CPU": 1.0, "node_b": 1.0}},
        "bundles_to_node_id": {0: ""},
    },
    TRAIN: {
        "name": "grm-train",
        "state": "CREATED",
        "stats": {"scheduling_state": "FINISHED", "scheduling_attempt": 1},
        "bundles": {0: {"CPU": 1.0, "node_a": 1.0}},
        "bundles_to_node_id": {0: NODE_A},
    },
    DEAD_JOB: {  # a removed group holds nothing, wherever it was
        "name": "grm-judge",
        "state": "REMOVED",
        "stats": {"scheduling_state": "REMOVED", "scheduling_attempt": 151},
        "bundles": {0: {"CPU": 1.0, "node_b": 1.0}},
        "bundles_to_node_id": {0: "e226870f" + "b" * 48},
    },
}
TOTAL = {"CPU": 2.0, "node_a": 1.0, "node_b": 1.0, "memory": 4e10}
BUNDLES = [{"CPU": 1.0, "node_b": 1.0}]


def test_resources_booked_outside_any_group_are_named_with_the_way_out():
    why = placement_wait_reason(TABLE, WAITING, BUNDLES, TOTAL, {"memory": 4e10})
    assert why.startswith("Ray's state NO_RESOURCES after 31 attempt(s)")
    held = "1 held by placement groups ('grm-train' (CREATED, node 7c4bc853aaaa))"
    assert f"CPU: 1 needed, 2 in the cluster, 0 free, {held}, 1 taken outside any placement group" in why
    assert "node_b: 1 needed, 1 in the cluster, 0 free, 0 held by placement groups, 1 taken outside any placement group" in why
    assert "restart that node on another --node-manager-port, or restart the cluster" in why
    assert "node_a" not in why.split(";")[1]  # a resource the pool does not ask for is not listed


def test_resources_held_by_other_groups_name_them_without_blaming_ray():
    table = {**TABLE, TRAIN: {**TABLE[TRAIN], "bundles": {0: {"CPU": 1.0, "node_b": 1.0}}}}
    why = placement_wait_reason(table, WAITING, BUNDLES, {"CPU": 1.0, "node_b": 1.0}, {})
    assert "node_b: 1 needed, 1 in the cluster, 0 free, 1 held by placement groups ('grm-train' (CREATED" in why
    assert "taken outside" not in why and "restart" not in why


def test_a_resource_that_is_free_enough_is_left_out_and_an_unknown_group_still_reads():
    why = placement_wait_reason({}, WAITING, BUNDLES, TOTAL, {"CPU": 1.0})
    assert why.startswith("Ray's state unknown after ? attempt(s)")
    assert "CPU:" not in why and "node_b: 1 needed" in why
