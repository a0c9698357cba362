"""The Lua scripts ``cluster.registry`` runs in Redis, each atomic (its rule 1): what each takes
and returns is said above it; why: the registry's rules and docs/cluster.md, "Leases".
"""

#: KEYS: the sorted set of deadlines, the hash of URLs, the set of standbys, the hash of
#: assignments. ARGV: name, URL, lease in ms (a name of "" only reads), "1" if a standby.
#: Returns {flat name, URL, ... of the live members; the standbys; flat part, member and
#: giver, ...}.
BEAT = """
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ms)
for _, name in ipairs(dead) do
  redis.call('ZREM', KEYS[1], name)
  redis.call('HDEL', KEYS[2], name)
  redis.call('SREM', KEYS[3], name)
end
if ARGV[1] ~= '' then
  redis.call('ZADD', KEYS[1], ms + tonumber(ARGV[3]), ARGV[1])
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
  if ARGV[4] == '1' then
    redis.call('SADD', KEYS[3], ARGV[1])
  else
    redis.call('SREM', KEYS[3], ARGV[1])
  end
end
local live = redis.call('ZRANGE', KEYS[1], 0, -1)
local out = {}
for _, name in ipairs(live) do
  table.insert(out, name)
  table.insert(out, redis.call('HGET', KEYS[2], name) or '')
end
local assigned = {}
local held = redis.call('HGETALL', KEYS[4])
for i = 1, #held, 2 do
  local member = string.match(held[i + 1], '^([^\\n]*)')
  if redis.call('ZSCORE', KEYS[1], member) then
    table.insert(assigned, held[i])
    table.insert(assigned, held[i + 1])
  else
    redis.call('HDEL', KEYS[4], held[i])
  end
end
local standby = {}
for _, name in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  if redis.call('ZSCORE', KEYS[1], name) then
    table.insert(standby, name)
  else
    redis.call('SREM', KEYS[3], name)
  end
end
return {out, standby, assigned}
"""

#: KEYS: as ``BEAT``'s. ARGV: giver, target, n, the n members owning by rendezvous as the giver
#: read them, then each part and its assignment as stored (``Assignment.stored``). Returns the
#: parts assigned, or an error saying why none was.
ASSIGN = """
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local function live(name)
  local deadline = redis.call('ZSCORE', KEYS[1], name)
  return deadline and tonumber(deadline) > ms
end
if not live(ARGV[1]) then return redis.error_reply('the giver ' .. ARGV[1] .. ' is not live') end
if not live(ARGV[2]) then return redis.error_reply('the relay ' .. ARGV[2] .. ' is not live') end
local n = tonumber(ARGV[3])
local owners = 0
for _, name in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ms, '+inf')) do
  if redis.call('SISMEMBER', KEYS[3], name) == 0 then owners = owners + 1 end
end
if owners ~= n then return redis.error_reply('the map changed: members joined or left') end
for i = 4, 3 + n do
  if not live(ARGV[i]) or redis.call('SISMEMBER', KEYS[3], ARGV[i]) == 1 then
    return redis.error_reply('the map changed: members joined or left')
  end
end
for i = 4 + n, #ARGV, 2 do
  local held = redis.call('HGET', KEYS[4], ARGV[i])
  if held and string.match(held, '^([^\\n]*)') ~= ARGV[1] then
    return redis.error_reply('part ' .. ARGV[i] .. " is not the giver's any more")
  end
end
for i = 4 + n, #ARGV, 2 do
  redis.call('HSET', KEYS[4], ARGV[i], ARGV[i + 1])
end
return (#ARGV - 3 - n) / 2
"""

#: KEYS: the hash of assignments. ARGV: the member, then the parts it holds warm (its rule 6).
#: Returns how many were assigned to it and waiting.
WARMED = """
local count = 0
for i = 2, #ARGV do
  local held = redis.call('HGET', KEYS[1], ARGV[i])
  if held then
    local line = '([^\\n]*)\\n'
    local member, giver, ready, warm = string.match(held, '^' .. line .. line .. line .. '(.*)$')
    if member == ARGV[1] and ready == '0' then
      redis.call('HSET', KEYS[1], ARGV[i], member .. '\\n' .. giver .. '\\n1\\n' .. warm)
      count = count + 1
    end
  end
end
return count
"""

#: KEYS: the hash of assignments. ARGV: the member handing back, then the parts. Returns how
#: many it held and handed back.
UNASSIGN = """
local count = 0
for i = 2, #ARGV do
  local held = redis.call('HGET', KEYS[1], ARGV[i])
  if held and string.match(held, '^([^\\n]*)') == ARGV[1] then
    redis.call('HDEL', KEYS[1], ARGV[i])
    count = count + 1
  end
end
return count
"""

LEAVE = """
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('SREM', KEYS[3], ARGV[1])
return 1
"""
