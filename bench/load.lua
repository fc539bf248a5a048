-- bench/load.lua - wrk script for bench/load.sh: POSTs one image (LOAD_IMAGE, raw body with
-- LOAD_CTYPE) to LOAD_PATH and counts responses by status across wrk's threads. Prints
-- machine-readable "LOAD ..." lines at the end for load.sh.
local f = assert(io.open(os.getenv("LOAD_IMAGE"), "rb"))
local image = f:read("*a")
f:close()

wrk.method = "POST"
wrk.path = os.getenv("LOAD_PATH") or "/api/v1/convert"
wrk.body = image
wrk.headers["Content-Type"] = os.getenv("LOAD_CTYPE") or "application/octet-stream"

local threads = {}

function setup(thread)
    table.insert(threads, thread)
end

function init(args)
    statuses = {}
end

function response(status, headers, body)
    -- A 503 without Retry-After counts as its own status (999): clients need the hint.
    if status == 503 and not (headers["Retry-After"] or headers["retry-after"]) then
        status = 999
    end
    statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
    local total = {}
    for _, t in ipairs(threads) do
        for code, n in pairs(t:get("statuses")) do
            total[code] = (total[code] or 0) + n
        end
    end
    local e = summary.errors
    io.write(string.format("LOAD responses=%d duration_s=%.3f mean_ms=%.1f p50_ms=%.1f " ..
        "p99_ms=%.1f max_ms=%.1f connect_errors=%d read_errors=%d write_errors=%d " ..
        "timeouts=%d\n", summary.requests, summary.duration / 1e6, latency.mean / 1e3,
        latency:percentile(50) / 1e3, latency:percentile(99) / 1e3, latency.max / 1e3,
        e.connect, e.read, e.write, e.timeout))
    for code, n in pairs(total) do
        io.write(string.format("LOAD status=%d count=%d\n", code, n))
    end
end
