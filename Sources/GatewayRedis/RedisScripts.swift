/// The store's atomic steps, each one Lua script run by `EVALSHA` (loaded with `SCRIPT LOAD` on
/// every connect, and again on a `NOSCRIPT` reply). See docs/redis.md for the key layout.
///
/// Challenge hash fields: `p` purpose (0 any, 1 register, 2 assert), `k` bound key id (32 bytes,
/// absent when unbound), `e` expiry (Unix ms, the caller's clock), `u` "1" once consumed.
/// Key hash fields: `pk` point, `ctr` counter, `app`, `env` (0/1), `cat`, `bv`, `fs`, `ls` (Unix ms),
/// `rc` receipt, `rn` re-registrations in the window that started at `rw` (Unix ms), `cw` the counter
/// window's open counters (`CounterWindow`): `<ctr>:<bits>`, bit i (character i + 1, `1` open) for
/// counter `ctr − 1 − i`, trailing `0`s dropped; absent when none is open. A `cw` naming another
/// counter than `ctr` (written before a build without windows moved `ctr`) is stale: no counter open.
/// The receipt's risk (`KeyRisk`): `rcr` creation time, `rnb` not-before, `rex` expiration, `rnx`
/// next refresh (Unix ms), `rm` risk metric, `rs` "1" while stale. The risk refresher's schedule is
/// the sorted set `ag:riskdue` (member: key id, score: next refresh in Unix ms). Keys per account:
/// `ah` the account's SHA-256, `an` its key count, `at` the association's time (Unix ms); the
/// account's keys are the sorted set `ag:a:{…}…` (RedisAttestStore+Accounts.swift).
enum RedisScripts {
    /// KEYS[1] challenge. ARGV: purpose, bound key ("" = none), expiry ms, Redis expiry ms.
    /// Returns 1, or 0 when the name is taken (a 128-bit collision: the caller draws again).
    static let issue = """
        if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
        if ARGV[2] ~= '' then
          redis.call('HSET', KEYS[1], 'p', ARGV[1], 'e', ARGV[3], 'k', ARGV[2])
        else
          redis.call('HSET', KEYS[1], 'p', ARGV[1], 'e', ARGV[3])
        end
        redis.call('PEXPIRE', KEYS[1], ARGV[4])
        return 1
        """

    /// The challenge check shared by both steps: nil when usable, else the rejection's name.
    /// `want`: the purpose code the step needs; `key`: the key id the step is for.
    private static let check = """
        local function check(name, now, want, key)
          local c = redis.call('HMGET', name, 'p', 'k', 'e', 'u')
          if not c[3] then return 'unknown' end
          if c[4] == '1' then return 'consumed' end
          if now >= tonumber(c[3]) then return 'expired' end
          if c[1] ~= '0' and c[1] ~= want then return 'wrong_purpose' end
          if c[2] and c[2] ~= key then return 'wrong_key' end
          return nil
        end
        """

    /// KEYS[1] key record, KEYS[2] challenge, KEYS[3] key count and KEYS[4] the refresh schedule
    /// (single server only: on Cluster both are other slots, so the script gets two keys and the
    /// client `INCR`s the count after a `new` answer, as a separate, non-atomic statistic, and
    /// schedules the refresh with its own `ZADD`).
    /// ARGV: now, key id, point, counter, app, env, category ("" none), bundle ("" none, else "v" ‖ text),
    /// first seen, last seen, receipt, max re-registrations per window, window ms, max keys,
    /// "1" when the client saw the key count at the cap (Cluster: the script cannot read it),
    /// then the receipt's creation time, not-before, expiration and first refresh (ms, "" none;
    /// without a creation time the key has no dated receipt and is not refreshed). The risk metric
    /// of a key registered again stays; it is no longer stale.
    /// Returns {'new'|'existing'|rejection, 0} | {'app_conflict', 0, registered app} |
    /// {'rereg_limited', ms until the window ends} | {'key_capacity', key count}.
    /// Re-registration window fields of the key: `rn` count, `rw` start (Unix ms).
    static let register =
        check + """

            local why = check(KEYS[2], tonumber(ARGV[1]), '1', ARGV[2])
            if why then return {why, 0} end
            local old = redis.call('HMGET', KEYS[1], 'ctr', 'fs', 'ls', 'app', 'rn', 'rw')
            local existing = old[1] ~= false
            local now = tonumber(ARGV[1])
            local ctr = tonumber(ARGV[4])
            local fs = tonumber(ARGV[9])
            local ls = tonumber(ARGV[10])
            local rn = 0
            local rw = 0
            if existing then
              if old[4] ~= ARGV[5] then return {'app_conflict', 0, old[4] or ''} end
              rn = tonumber(old[5] or '0')
              rw = tonumber(old[6] or '0')
              local window = tonumber(ARGV[13])
              if rn == 0 or now >= rw + window then
                rn = 0
                rw = now
              end
              if rn >= tonumber(ARGV[12]) then return {'rereg_limited', rw + window - now} end
              rn = rn + 1
              ctr = math.max(ctr, tonumber(old[1]))
              fs = tonumber(old[2])
              ls = math.max(ls, tonumber(old[3]))
            elseif #KEYS > 2 then
              local n = tonumber(redis.call('GET', KEYS[3]) or '0')
              if n >= tonumber(ARGV[14]) then return {'key_capacity', n} end
            elseif ARGV[15] == '1' then
              return {'key_capacity', 0}
            end
            redis.call('HSET', KEYS[1], 'pk', ARGV[3], 'ctr', string.format('%d', ctr), 'app', ARGV[5], 'env', ARGV[6],
              'fs', string.format('%d', fs), 'ls', string.format('%d', ls), 'rc', ARGV[11],
              'rn', string.format('%d', rn), 'rw', string.format('%d', rw))
            if ARGV[7] == '' then redis.call('HDEL', KEYS[1], 'cat') else redis.call('HSET', KEYS[1], 'cat', ARGV[7]) end
            if ARGV[8] == '' then redis.call('HDEL', KEYS[1], 'bv') else redis.call('HSET', KEYS[1], 'bv', string.sub(ARGV[8], 2)) end
            redis.call('HDEL', KEYS[1], 'cw')
            redis.call('HDEL', KEYS[1], 'rs')
            local dated = ARGV[16] ~= nil and ARGV[16] ~= ''
            if dated then
              redis.call('HSET', KEYS[1], 'rcr', ARGV[16])
              if ARGV[17] == '' then redis.call('HDEL', KEYS[1], 'rnb') else redis.call('HSET', KEYS[1], 'rnb', ARGV[17]) end
              if ARGV[18] == '' then redis.call('HDEL', KEYS[1], 'rex') else redis.call('HSET', KEYS[1], 'rex', ARGV[18]) end
            else
              redis.call('HDEL', KEYS[1], 'rcr', 'rnb', 'rex')
            end
            local refresh = ARGV[19] or ''
            if refresh == '' or not dated then
              redis.call('HDEL', KEYS[1], 'rnx')
              if #KEYS > 3 then redis.call('ZREM', KEYS[4], ARGV[2]) end
            else
              redis.call('HSET', KEYS[1], 'rnx', refresh)
              if #KEYS > 3 then redis.call('ZADD', KEYS[4], refresh, ARGV[2]) end
            end
            redis.call('HSET', KEYS[2], 'u', '1')
            if existing then return {'existing', 0} end
            if #KEYS > 2 then redis.call('INCR', KEYS[3]) end
            return {'new', 0}
            """

    /// The counter window (`CounterWindow`) on a key hash's `ctr` and `cw`, as strings of `0`/`1`.
    private static let window = """

        local function trim(bits) return (string.gsub(bits, '0+$', '')) end
        local function gaps(rec)
          local cw = rec[2]
          if not cw then return '' end
          local colon = string.find(cw, ':', 1, true)
          if not colon or string.sub(cw, 1, colon - 1) ~= rec[1] then return '' end
          return string.sub(cw, colon + 1)
        end
        """

    /// Issue 27, `assertion.key_rate` (`KeyRateLimit`): the token bucket of one (key, route), a
    /// string `<tokens> <last ms>` under the key's hash tag (`ag:r:{tag}…:<route>`), expiring
    /// `idleMillis` after its last token was taken (a bucket that old is full). `r`: {name, count,
    /// period ms, burst, idle ms}. Returns {true, tokens left once this commit's is taken, last ms} or
    /// {false, seconds until a token is back}: the arithmetic of `KeyRateLimit.refill`/`retryAfter`.
    private static let keyRate = """

        local function keyrate(r, now)
          local count, period, burst = tonumber(r[2]), tonumber(r[3]), tonumber(r[4])
          local tokens, last = burst, now
          local v = redis.call('GET', r[1])
          if v then
            local sp = string.find(v, ' ', 1, true)
            if sp then
              tokens = tonumber(string.sub(v, 1, sp - 1)) or burst
              last = tonumber(string.sub(v, sp + 1)) or now
            end
          end
          tokens = math.min(burst, tokens + math.max(0, now - last) * count / period)
          if tokens >= 1 then return {true, tokens - 1, math.max(last, now)} end
          local wait = math.ceil((1 - tokens) * period / count / 1000)
          return {false, math.max(1, math.min(wait, 86400))}
        end
        """

    /// The commit shared by `commit` and `commitNext`: `key` the key record, `ch` the challenge (nil:
    /// none), `n` the counter, `width` the route's counter window (0: none), `checked` nil or the
    /// app, env, cat and bv ("" none, else "v" ‖ text) the caller decided on (a differing one:
    /// {'changed', 0}, nothing written). Returns as `commit` does, and, committed, the key hash's
    /// `ctr app env cat bv fs ls rm rs rcr rnb rex rnx ah an at` as the commit left it (third value). One
    /// `HMGET` reads all it needs and one `HSET` writes it (an `HDEL` more when the last open counter
    /// of the window closed): Redis' time per script is mostly its calls.
    private static let commitFunction = """

        local function commit(key, ch, now, keyid, n, width, checked, rate)
          local rec = redis.call('HMGET', key, 'ctr', 'cw', 'app', 'env', 'cat', 'bv', 'ls', 'fs', 'rm', 'rs', 'rcr', 'rnb', 'rex', 'rnx',
            'ah', 'an', 'at')  -- keys per account (issue 27): rec[15..17], returned last
          if not rec[1] then return {'unknown_key', 0} end
          if checked and (rec[3] ~= checked[1] or rec[4] ~= checked[2] or (rec[5] or '') ~= checked[3]
              or (rec[6] and 'v' .. rec[6] or '') ~= checked[4]) then
            return {'changed', 0}
          end
          local cur = tonumber(rec[1])
          local g = gaps(rec)
          local top = cur
          if n > cur then
            local d = n - cur
            if d > 63 then g = string.rep('1', 63) else g = string.rep('1', d - 1) .. '0' .. g end
            g = trim(string.sub(g, 1, 63))
            top = n
          else
            local d = cur - n
            if d < 1 or d >= width or d > 63 or string.sub(g, d, d) ~= '1' then
              return {'replay', cur, string.sub(g, 1, math.max(0, math.min(width, 64) - 1))}
            end
            g = trim(string.sub(g, 1, d - 1) .. '0' .. string.sub(g, d + 1))
          end
          if ch then
            local why = check(ch, now, '2', keyid)
            if why then return {why, 0} end
          end
          -- issue 27, key_rate: the key's bucket, after every other check, before any write
          local kr = nil
          if rate then
            kr = keyrate(rate, now)
            if not kr[1] then return {'key_rate_limited', kr[2]} end
          end
          -- end key_rate
          local ls = string.format('%d', math.max(tonumber(rec[7] or '0'), now))
          local ctr = string.format('%d', top)
          if g == '' then
            redis.call('HSET', key, 'ctr', ctr, 'ls', ls)
            if rec[2] then redis.call('HDEL', key, 'cw') end
          else
            redis.call('HSET', key, 'ctr', ctr, 'ls', ls, 'cw', ctr .. ':' .. g)
          end
          if ch then redis.call('HSET', ch, 'u', '1') end
          -- issue 27, key_rate: the accepted commit's token
          if kr then
            redis.call('SET', rate[1], string.format('%.17g', kr[2]) .. ' ' .. string.format('%d', kr[3]), 'PX', rate[5])
          end
          -- end key_rate
          return {'committed', cur,
            {ctr, rec[3], rec[4], rec[5], rec[6], rec[8], ls, rec[9], rec[10], rec[11], rec[12], rec[13], rec[14],
             rec[15], rec[16], rec[17]}}
        end
        """

    /// KEYS[1] key record, KEYS[2] challenge (absent: no challenge), then (with a key rate) the
    /// bucket. ARGV: now, key id, counter, the route's counter window (0: none), "1" with a challenge,
    /// then with a key rate: count, period ms, burst, idle ms.
    /// Returns {'committed', previous} | {'unknown_key', 0} | {'replay', stored, open} | {rejection, 0}
    /// | {'key_rate_limited', seconds},
    /// `open`: the window's open counters a route window of that width still accepted (`cw` bits).
    static let commit =
        check + window + keyRate + commitFunction + """

            local ch = nil
            if ARGV[5] == '1' then ch = KEYS[2] end
            local rate = nil
            if ARGV[6] then rate = {KEYS[#KEYS], ARGV[6], ARGV[7], ARGV[8], ARGV[9]} end
            local r = commit(KEYS[1], ch, tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), nil, rate)
            if r[1] == 'committed' then return {'committed', r[2]} end
            return r
            """

    /// The assertion gate's one round trip: the commit (as `commit`, after checking that the key's
    /// policy fields are still those the gate decided on) and, when it went through, the next
    /// challenge (as `issue`), then the key's record as the commit left it.
    /// KEYS[1] key record, then the challenge when ARGV[5] is "1", then the next challenge when
    /// ARGV[10] is not "". ARGV: now, key id, counter, window, "1" with a challenge, checked app, env,
    /// cat, bv ("" none, else "v" ‖ text), next purpose code, next bound key, next expiry ms, next Redis
    /// expiry ms. Returns what `commit` returns (or {'changed', 0}); a committed one is
    /// {'committed', previous, issued (1, or 0 when the next name was taken), record} with record
    /// the key hash's `ctr app env cat bv fs ls rm rs rcr rnb rex rnx ah an at`.
    /// With a key rate (issue 27), the bucket is the last key and ARGV[14…17] are count, period ms,
    /// burst, idle ms; a key over it gets {'key_rate_limited', seconds}, nothing written.
    static let commitNext =
        check + window + keyRate + commitFunction + """

            local ch = nil
            local nx = 2
            if ARGV[5] == '1' then ch = KEYS[2]; nx = 3 end
            local rate = nil
            if ARGV[14] then rate = {KEYS[#KEYS], ARGV[14], ARGV[15], ARGV[16], ARGV[17]} end
            local r = commit(KEYS[1], ch, tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]),
              {ARGV[6], ARGV[7], ARGV[8], ARGV[9]}, rate)
            if r[1] ~= 'committed' then return r end
            local issued = 0
            if ARGV[10] ~= '' and redis.call('EXISTS', KEYS[nx]) == 0 then
              if ARGV[11] ~= '' then
                redis.call('HSET', KEYS[nx], 'p', ARGV[10], 'e', ARGV[12], 'k', ARGV[11])
              else
                redis.call('HSET', KEYS[nx], 'p', ARGV[10], 'e', ARGV[12])
              end
              redis.call('PEXPIRE', KEYS[nx], ARGV[13])
              issued = 1
            end
            return {'committed', r[2], issued, r[3]}
            """

    /// KEYS[1] the refresh schedule. ARGV: now, lease end, limit (ms, ms, count). Claims up to
    /// `limit` members due at `now` (their score moves to the lease end: no other gateway takes them
    /// while the lease runs). Returns {oldest due score or "", {member, …}}.
    static let claimRefreshes = """
        local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[3]))
        local out = {}
        local oldest = ''
        for i = 1, #due, 2 do
          if oldest == '' then oldest = due[i + 1] end
          out[#out + 1] = due[i]
          redis.call('ZADD', KEYS[1], ARGV[2], due[i])
        end
        return {oldest, out}
        """

    /// KEYS[1] key record, KEYS[2] the refresh schedule (single server only). ARGV: the creation time
    /// the refresh started from, new receipt ("" keep), metric ("" none), stale ("1"/"0"), creation
    /// time, not-before, expiration, next refresh ("" none), key id. Writes only over the receipt the
    /// refresh started from. Returns 'stored', 'key_gone' or 'superseded'.
    static let recordRefresh = """
        if redis.call('EXISTS', KEYS[1]) == 0 then
          if #KEYS > 1 then redis.call('ZREM', KEYS[2], ARGV[9]) end
          return 'key_gone'
        end
        if redis.call('HGET', KEYS[1], 'rcr') ~= ARGV[1] then return 'superseded' end
        if ARGV[2] ~= '' then redis.call('HSET', KEYS[1], 'rc', ARGV[2]) end
        if ARGV[3] == '' then redis.call('HDEL', KEYS[1], 'rm') else redis.call('HSET', KEYS[1], 'rm', ARGV[3]) end
        if ARGV[4] == '1' then redis.call('HSET', KEYS[1], 'rs', '1') else redis.call('HDEL', KEYS[1], 'rs') end
        redis.call('HSET', KEYS[1], 'rcr', ARGV[5])
        if ARGV[6] == '' then redis.call('HDEL', KEYS[1], 'rnb') else redis.call('HSET', KEYS[1], 'rnb', ARGV[6]) end
        if ARGV[7] == '' then redis.call('HDEL', KEYS[1], 'rex') else redis.call('HSET', KEYS[1], 'rex', ARGV[7]) end
        if ARGV[8] == '' then
          redis.call('HDEL', KEYS[1], 'rnx')
          if #KEYS > 1 then redis.call('ZREM', KEYS[2], ARGV[9]) end
        else
          redis.call('HSET', KEYS[1], 'rnx', ARGV[8])
          if #KEYS > 1 then redis.call('ZADD', KEYS[2], ARGV[8], ARGV[9]) end
        end
        return 'stored'
        """

    static let all =
        [issue, register, commit, commitNext, claimRefreshes, recordRefresh]
        + [RedisAccountScripts.accountAdd, RedisAccountScripts.keyAccount]
}
