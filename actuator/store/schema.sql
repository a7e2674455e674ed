CREATE TABLE IF NOT EXISTS episodes (
    fingerprint TEXT NOT NULL,
    starts_at   TEXT NOT NULL,
    starts_ts   REAL NOT NULL,
    alertname   TEXT NOT NULL,
    labels      TEXT NOT NULL,
    annotations TEXT NOT NULL,
    status      TEXT NOT NULL,
    ends_ts     REAL,
    first_seen  REAL NOT NULL,
    last_seen   REAL NOT NULL,
    deliveries  INTEGER NOT NULL DEFAULT 1,
    processed   INTEGER NOT NULL DEFAULT 0,
    case_id     INTEGER,
    PRIMARY KEY (fingerprint, starts_at)
);
CREATE INDEX IF NOT EXISTS episodes_todo ON episodes (processed) WHERE processed = 0;
CREATE INDEX IF NOT EXISTS episodes_case ON episodes (case_id);
CREATE TABLE IF NOT EXISTS cases (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    state       TEXT NOT NULL,
    live        INTEGER NOT NULL,
    version     INTEGER NOT NULL DEFAULT 0,
    node        TEXT NOT NULL,
    pid         INTEGER NOT NULL,
    start_time  REAL NOT NULL,
    start_ticks INTEGER NOT NULL,
    boot_id     TEXT NOT NULL,
    uuid        TEXT NOT NULL,
    data        TEXT NOT NULL,
    members     TEXT,  -- the recorded tree (JSON), NULL in a row written before (in data)
    created     REAL NOT NULL,
    updated     REAL NOT NULL,
    term_at     REAL,
    reason_code TEXT NOT NULL DEFAULT '',
    "user"      TEXT,  -- quoted: a reserved word in PostgreSQL
    freed_bytes INTEGER NOT NULL DEFAULT 0,
    created_mono REAL NOT NULL DEFAULT 0,
    term_mono   REAL,
    followup    INTEGER
);
-- One live case per process: the same key the identity check uses (Target.key).
CREATE UNIQUE INDEX IF NOT EXISTS one_live_case_per_target
    ON cases (node, boot_id, pid, start_ticks, uuid) WHERE live = 1;
CREATE INDEX IF NOT EXISTS cases_state ON cases (state);
CREATE INDEX IF NOT EXISTS cases_term ON cases (term_mono) WHERE term_mono IS NOT NULL;
CREATE INDEX IF NOT EXISTS cases_rearm ON cases (state, reason_code) WHERE followup IS NULL;
CREATE TABLE IF NOT EXISTS timeline (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    case_id  INTEGER NOT NULL,
    ts       REAL NOT NULL,
    state    TEXT NOT NULL,
    reason   TEXT NOT NULL,
    evidence TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS timeline_case ON timeline (case_id);
CREATE TABLE IF NOT EXISTS signals (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    case_id INTEGER NOT NULL,
    ts      REAL NOT NULL,
    pid     INTEGER NOT NULL,
    signal  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS counters (
    name  TEXT NOT NULL,
    label TEXT NOT NULL,
    value INTEGER NOT NULL,
    PRIMARY KEY (name, label)
);
CREATE TABLE IF NOT EXISTS lease (
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires    REAL NOT NULL,  -- boot-time clock
    progressed REAL            -- when the holder last finished a tick (boot-time clock)
);
CREATE TABLE IF NOT EXISTS breaker (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    open      INTEGER NOT NULL,
    since     REAL,
    reason    TEXT NOT NULL DEFAULT ''
);
-- Keep links that acted once: a nonce is used at most once.
CREATE TABLE IF NOT EXISTS keep_links (
    nonce   TEXT PRIMARY KEY,
    case_id INTEGER NOT NULL,
    used_at REAL NOT NULL,
    action  TEXT NOT NULL
);
-- Keeps asked before any case existed: honoured when a case opens for that very process.
CREATE TABLE IF NOT EXISTS keeps (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    node        TEXT NOT NULL,
    pid         INTEGER NOT NULL,
    start_ticks INTEGER NOT NULL,
    boot_id     TEXT NOT NULL,
    uid         INTEGER NOT NULL,
    until_ts    REAL NOT NULL,
    created     REAL NOT NULL,
    by_whom     TEXT NOT NULL,
    revoked     INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS keeps_target ON keeps (node, pid, start_ticks);
-- The node's wait list (`gpu-reclaimer wait`): callers waiting for GPUs, in order.
CREATE TABLE IF NOT EXISTS waiters (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    node         TEXT NOT NULL,
    uid          INTEGER NOT NULL,
    pid          INTEGER NOT NULL,
    start_ticks  INTEGER NOT NULL,
    gpus         INTEGER NOT NULL,
    memory_bytes INTEGER NOT NULL,
    created      REAL NOT NULL,
    expires      REAL NOT NULL,
    state        TEXT NOT NULL,
    ended        REAL,
    given        TEXT NOT NULL DEFAULT '',
    taken        REAL NOT NULL DEFAULT 0  -- when its job was seen on its GPUs (0: not yet)
);
CREATE INDEX IF NOT EXISTS waiters_node ON waiters (node, state);
-- Evidence pictures sent with notices (PNG): kept as long as their case.
CREATE TABLE IF NOT EXISTS pictures (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    case_id INTEGER NOT NULL,
    created REAL NOT NULL,
    png     BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS pictures_case ON pictures (case_id);
