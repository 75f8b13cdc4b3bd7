from bench import agent_loop, short_chat
from bench.mixed import decode_budget
from bench.scale import SCALES, get_scale

TINY = SCALES["tiny"]


def test_prompts_are_reproducible_from_the_seed():
    assert agent_loop.messages_for(TINY, 7, 2) == agent_loop.messages_for(TINY, 7, 2)
    assert agent_loop.messages_for(TINY, 7, 2) != agent_loop.messages_for(TINY, 8, 2)
    first = [r.messages for r in short_chat.requests_for(TINY, 3, 2)]
    assert first == [r.messages for r in short_chat.requests_for(TINY, 3, 2)]
    assert len({str(m) for m in first}) == len(first)  # no two requests share a prompt


def test_agent_loop_turns_grow_a_tail_behind_a_stable_prefix():
    turn1 = agent_loop.messages_for(TINY, 0, 1)
    turn2 = agent_loop.messages_for(TINY, 0, 2)
    assert turn2[: len(turn1)][1:] == turn1[1:]  # history is kept, only appended to
    assert [m["role"] for m in turn2[len(turn1) :]] == ["assistant", "tool"]
    assert agent_loop.tools(0) == agent_loop.tools(0)


def test_agent_loop_timestamp_is_the_only_volatile_part_of_the_system_prompt():
    a = agent_loop.system_prompt(TINY, 0, 0)
    b = agent_loop.system_prompt(TINY, 0, 1)
    assert a != b
    head = a.rsplit("Current date and time:", 1)[0]
    assert b.startswith(head)
    assert agent_loop.timestamp(1) == "2026-01-15T09:31:37Z"


def test_decode_budget_outlasts_the_probe_prefill_within_the_room():
    assert decode_budget(TINY, prefill_s=1.0, itl_s=0.01, room=10_000) == 4 + 800
    assert decode_budget(TINY, prefill_s=1.0, itl_s=0.0, room=100_000) == 4 + 80_000  # bursts
    assert decode_budget(TINY, prefill_s=100.0, itl_s=0.01, room=500) == 500


def test_tiny_scale_is_smaller_than_full():
    tiny, full = get_scale("tiny"), get_scale("full")
    assert tiny.agent_turns < full.agent_turns
    assert max(tiny.chat_concurrency) < max(full.chat_concurrency)
