-- Presence and reach (SPEC §8a): per agent and room, the state its hooks
-- report (`POST /v1/presence`), its attention switch (`set_attention`),
-- and when its hook and its push clients (channel, monitor, rewake) were
-- last seen, for `reach` (each replica writes the marks of the clients it
-- holds, so every replica answers for all of them). Written when set, or
-- in batches; never pruned (one row per agent and room), removed with the
-- room.
CREATE TABLE agent_status (
    room          TEXT NOT NULL,
    agent         TEXT NOT NULL,
    state         TEXT,
    state_ts      BIGINT,
    attention     TEXT,
    attention_ts  BIGINT,
    hook_seen_ts  BIGINT,
    push_seen_ts  BIGINT,
    PRIMARY KEY (room, agent)
);
