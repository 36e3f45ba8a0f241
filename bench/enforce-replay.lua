-- wrk script for bench/enforce-vs-openssl: replays requests pre-signed by `attest-sim presign`
-- (one per line: method, target, key id, challenge or "-", assertion, body; tab-separated), each
-- once, in file order. All formatting happens in init(): request() only hands out the next string.
-- After the last line it sends GET /presign-exhausted (refused: counted as non-2xx); the bench
-- compares wrk's request count with the pool and flags a run that outlasted it. With a third
-- argument "wrap" it starts again from the first line instead (bench/enforce-vs-openssl's plain
-- mode: a route without assertion checks forwards the same requests any number of times).
--   wrk -t1 -c16 -d5s -s bench/enforce-replay.lua http://127.0.0.1:PORT -- FILE [THREADS [wrap]]
local reqs = {}
local n = 0
local i = 0
local exhausted
-- With -tN, thread t (0-based) takes lines t, t + N, t + 2N, …: with a number of keys divisible by N
-- each key is one thread's, so its counters still arrive in order.
local threads = 0
local wrap = false

function setup(thread)
  thread:set("id", threads)
  threads = threads + 1
end

function init(args)
  local line_no = -1
  local nthreads = tonumber(args[2] or "1")
  wrap = args[3] == "wrap"
  for line in io.lines(args[1]) do
    line_no = line_no + 1
    local m, p, k, c, a, b = line:match("^([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t(.*)$")
    if m and line_no % nthreads == (id or 0) then
      local h = { ["X-App-Attest-Key-Id"] = k, ["X-App-Assertion"] = a }
      if c ~= "-" then h["X-App-Attest-Challenge"] = c end
      if #b > 0 then h["Content-Type"] = "application/octet-stream" end
      n = n + 1
      reqs[n] = wrk.format(m, p, h, b)
    end
  end
  exhausted = wrk.format("GET", "/presign-exhausted")
end

function request()
  i = i + 1
  if i > n then
    if not wrap then return exhausted end
    i = 1
  end
  return reqs[i]
end
