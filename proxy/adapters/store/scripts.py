"""The Lua scripts of the Redis store (`redis_store.py`), each run by EVALSHA on the node
its keys hash to: every key a script touches has the same hash tag, as Redis Cluster
requires. `SCRIPTS` lists those the store runs (their SHA1s are computed once)."""

REFRESH = """
for _, key in ipairs(KEYS) do redis.call('PEXPIRE', key, ARGV[1]) end
"""

# KEYS: checkpoints, checkpoint_order. ARGV: ttl_ms, prefix hash, checkpoint JSON, how many
# to keep. Returns the existing one, or nil if stored (and the oldest dropped past the bound).
PUT_CHECKPOINT = """
local existing = redis.call('HGET', KEYS[1], ARGV[2])
if not existing then
  redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
  redis.call('RPUSH', KEYS[2], ARGV[2])
  while redis.call('LLEN', KEYS[2]) > tonumber(ARGV[4]) do
    redis.call('HDEL', KEYS[1], redis.call('LPOP', KEYS[2]))
  end
  if #KEYS > 2 then
    redis.call('RPUSH', KEYS[4], ARGV[5])
    redis.call('LTRIM', KEYS[4], -tonumber(ARGV[6]), -1)
    redis.call('HSET', KEYS[3], 'last_compaction_turn', redis.call('HGET', KEYS[3], 'turns') or '0')
    redis.call('HINCRBY', KEYS[3], 'compactions', 1)
    for i = 3, #KEYS do redis.call('PEXPIRE', KEYS[i], ARGV[1]) end
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
return existing or false
"""

# KEYS: checkpoints, checkpoint_order. ARGV: prefix hash. Returns 1 if there was one.
DROP_CHECKPOINT = """
redis.call('LREM', KEYS[2], 0, ARGV[1])
return redis.call('HDEL', KEYS[1], ARGV[1])
"""

# KEYS: state, history, archive. ARGV: ttl_ms, last_seen, '1' to set the model, model.
BEGIN_TURN = (
    """
redis.call('HINCRBY', KEYS[1], 'turns', 1)
redis.call('HSET', KEYS[1], 'last_seen', ARGV[2])
if ARGV[3] == '1' then redis.call('HSET', KEYS[1], 'model', ARGV[4]) end
"""
    + REFRESH
    + """
return {redis.call('HGETALL', KEYS[1]), redis.call('LRANGE', KEYS[2], 0, -1)}
"""
)

# KEYS: state, history, archive. ARGV: ttl_ms, record JSON, history limit.
RECORD_COMPACTION = (
    """
redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('LTRIM', KEYS[2], -tonumber(ARGV[3]), -1)
redis.call('HSET', KEYS[1], 'last_compaction_turn', redis.call('HGET', KEYS[1], 'turns') or '0')
redis.call('HINCRBY', KEYS[1], 'compactions', 1)
"""
    + REFRESH
)

# KEYS: state, history, archive. ARGV: ttl_ms, usage JSON, pressure.
RECORD_USAGE = (
    """
redis.call('HSET', KEYS[1], 'last_usage', ARGV[2], 'last_pressure', ARGV[3])
"""
    + REFRESH
)

# KEYS: state, history, archive, timeline, request. ARGV: ttl_ms, point JSON, timeline
# limit, tokens before, tokens after, pressure, context JSON, request JSON (empty: keep the
# old one).
RECORD_TURN = (
    """
redis.call('RPUSH', KEYS[4], ARGV[2])
redis.call('LTRIM', KEYS[4], -tonumber(ARGV[3]), -1)
redis.call('HINCRBY', KEYS[1], 'tokens_sent', ARGV[4])
redis.call('HINCRBY', KEYS[1], 'tokens_forwarded', ARGV[5])
redis.call('HSET', KEYS[1], 'last_pressure', ARGV[6], 'last_context', ARGV[7])
if ARGV[8] ~= '' then redis.call('SET', KEYS[5], ARGV[8]) end
if ARGV[9] ~= '0' then redis.call('HINCRBY', KEYS[1], 'recalls', ARGV[9]) end
"""
    + REFRESH
)

# KEYS: state, history.
READ_SESSION = """
return {redis.call('HGETALL', KEYS[1]), redis.call('LRANGE', KEYS[2], 0, -1)}
"""

# A Lua function, for the scripts that record a session's archived sequence: `list` takes
# the new list of hashes (`joined` by commas: a long history is one argument, not a hundred).
# Keeps the common prefix and appends the rest, so a growing history writes only its new
# messages (and the AOF and replicas see only those). Returns the length of the common
# prefix, and 1 when the bodies already stored are due to have their expiry moved (at most
# once per refresh_ms, kept in `refreshed`: a long history is not walked on every request).
#
# The caller may claim that the list holds the first `claimed` hashes already, named by
# `old_tip` (a digest of those hashes joined); `state`'s `archive_tip` field names what the
# list holds. When both agree, only the hashes from character `offset` of `joined` on are
# read and appended: a turn's work follows its new messages, not its history. Otherwise
# (another replica's turn, a rewind, an expired list) the whole list is compared.
_SEQUENCE = """
local function push(list, hashes, from)
  for i = from, #hashes, 1000 do
    redis.call('RPUSH', list, unpack(hashes, i, math.min(i + 999, #hashes)))
  end
end
local function sequence(list, state, refreshed, refresh_ms, joined, claimed, old_tip, new_tip,
                        offset)
  local hashes = {}
  local common = tonumber(claimed)
  if common > 0 and redis.call('HGET', state, 'archive_tip') == old_tip
      and redis.call('LLEN', list) == common then
    for h in string.gmatch(string.sub(joined, tonumber(offset)), '[^,]+') do
      hashes[#hashes + 1] = h
    end
    push(list, hashes, 1)
  else
    for h in string.gmatch(joined, '[^,]+') do hashes[#hashes + 1] = h end
    local old = redis.call('LRANGE', list, 0, -1)
    local new = #hashes
    common = 0
    while common < new and common < #old and old[common + 1] == hashes[common + 1] do
      common = common + 1
    end
    if common == 0 then
      redis.call('DEL', list)
    elseif common < #old then
      redis.call('LTRIM', list, 0, common - 1)
    end
    push(list, hashes, common + 1)
  end
  redis.call('HSET', state, 'archive_tip', new_tip)
  local due = redis.call('SET', refreshed, '1', 'NX', 'PX', refresh_ms)
  return {common, due and 1 or 0}
end
"""

# KEYS: archive, state, history, refreshed. ARGV: ttl_ms, refresh_ms, the new list's hashes,
# then the claim (`_SEQUENCE`: claimed, old tip, new tip, offset).
ARCHIVE_SEQUENCE = (
    _SEQUENCE
    + """
local result = sequence(KEYS[1], KEYS[2], KEYS[4], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6],
                        ARGV[7])
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[1]) end
return result
"""
)

# A Lua function: the checkpoint of the longest prefix there is in `checkpoints`, as
# {its prefix's length, its JSON}, the session's checkpoints' expiry moved; false when there
# is none. `joined`: the chain hash of each prefix of the body, shortest first, joined by
# commas. One argument travels, not a key per message of a long history, and one checkpoint
# comes back, not every one the conversation's compactions left. The session's few
# checkpoints (at most `MAX_CHECKPOINTS`) are looked for in the argument, not each of its
# hashes in the hash: a long history with no checkpoint costs one HKEYS.
_LONGEST = """
local function longest(checkpoints, order, ttl_ms, joined)
  local best, name = 0, nil
  for _, candidate in ipairs(redis.call('HKEYS', checkpoints)) do
    local from = 1
    while true do
      local first, last = string.find(joined, candidate, from, true)
      if not first then break end
      if first > best and (first == 1 or string.byte(joined, first - 1) == 44)
          and (last == #joined or string.byte(joined, last + 1) == 44) then
        best, name = first, candidate
      end
      from = first + 1
    end
  end
  if not name then return false end
  redis.call('PEXPIRE', checkpoints, ttl_ms)
  redis.call('PEXPIRE', order, ttl_ms)
  local _, commas = string.gsub(string.sub(joined, 1, best - 1), ',', '')
  return {commas + 1, redis.call('HGET', checkpoints, name)}
end
"""

# KEYS: checkpoints, checkpoint_order. ARGV: ttl_ms, the joined chain hashes (`_LONGEST`).
FIND_CHECKPOINT = (
    _LONGEST
    + """
return longest(KEYS[1], KEYS[2], ARGV[1], ARGV[2])
"""
)

# KEYS: checkpoints, checkpoint_order, then summary keys. ARGV: ttl_ms, the joined chain
# hashes ('' for none). `FIND_CHECKPOINT` and the summaries' values (false for a missing
# one) in one: what a compaction reads before it lands, in one round trip.
FIND_PREPARED = (
    _LONGEST
    + """
local found = false
if ARGV[2] ~= '' then found = longest(KEYS[1], KEYS[2], ARGV[1], ARGV[2]) end
local summaries = {}
for i = 3, #KEYS do summaries[#summaries + 1] = redis.call('GET', KEYS[i]) end
return {found, summaries}
"""
)

# KEYS: the session's (`_session_keys`), checkpoints, checkpoint_order. ARGV: ttl_ms, last_seen, '1'
# to set the model, model, the joined chain hashes ('' for none). `BEGIN_TURN` and
# `FIND_CHECKPOINT` in one: what every request reads first, in one round trip.
OPEN_TURN = (
    _LONGEST
    + """
redis.call('HINCRBY', KEYS[1], 'turns', 1)
redis.call('HSET', KEYS[1], 'last_seen', ARGV[2])
if ARGV[3] == '1' then redis.call('HSET', KEYS[1], 'model', ARGV[4]) end
for i = 1, 6 do redis.call('PEXPIRE', KEYS[i], ARGV[1]) end
local found = false
if ARGV[5] ~= '' then found = longest(KEYS[7], KEYS[8], ARGV[1], ARGV[5]) end
return {redis.call('HGETALL', KEYS[1]), redis.call('LRANGE', KEYS[2], 0, -1), found}
"""
)

# KEYS: state, history, archive, timeline, request, recall, refreshed. ARGV: ttl_ms, then
# `RECORD_TURN`'s (point JSON, timeline limit, tokens before, tokens after, pressure,
# context JSON, request JSON or '', recalls), then usage JSON ('' for none), refresh_ms, the
# archive's joined hashes ('' to archive nothing), the claim (`_SEQUENCE`). `RECORD_TURN`,
# `RECORD_USAGE` and `ARCHIVE_SEQUENCE` in one: what every answered request leaves, in one
# round trip.
END_TURN = (
    _SEQUENCE
    + """
redis.call('RPUSH', KEYS[4], ARGV[2])
redis.call('LTRIM', KEYS[4], -tonumber(ARGV[3]), -1)
redis.call('HINCRBY', KEYS[1], 'tokens_sent', ARGV[4])
redis.call('HINCRBY', KEYS[1], 'tokens_forwarded', ARGV[5])
redis.call('HSET', KEYS[1], 'last_pressure', ARGV[6], 'last_context', ARGV[7])
if ARGV[8] ~= '' then redis.call('SET', KEYS[5], ARGV[8]) end
if ARGV[9] ~= '0' then redis.call('HINCRBY', KEYS[1], 'recalls', ARGV[9]) end
if ARGV[10] ~= '' then redis.call('HSET', KEYS[1], 'last_usage', ARGV[10]) end
local result = {0, 0}
if ARGV[12] ~= '' then
  result = sequence(KEYS[3], KEYS[1], KEYS[7], ARGV[11], ARGV[12], ARGV[13], ARGV[14], ARGV[15],
                    ARGV[16])
end
for i = 1, 6 do redis.call('PEXPIRE', KEYS[i], ARGV[1]) end
return result
"""
)

# KEYS: lock. ARGV: token. Compare-and-delete, so only the holder frees it.
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

SCRIPTS = (
    PUT_CHECKPOINT,
    BEGIN_TURN,
    RECORD_COMPACTION,
    RECORD_USAGE,
    RECORD_TURN,
    READ_SESSION,
    ARCHIVE_SEQUENCE,
    FIND_CHECKPOINT,
    OPEN_TURN,
    END_TURN,
    FIND_PREPARED,
    DROP_CHECKPOINT,
    RELEASE,
)
