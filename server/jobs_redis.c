/*
 * jobs_redis.c - the Redis store of the video jobs (--jobs-redis; the layout is in
 * jobs_redis.h): the URL, connections that reconnect by themselves, and the Lua scripts
 * through which every change of a job's state goes, so that two instances never both take,
 * finish or delete one job. A connection that fails (refused, timed out, a reply hiredis
 * cannot parse) is dropped and tried again at most once a second; meanwhile the callers
 * answer 503 with Retry-After (the photo API never touches Redis).
 */
#include "jobs_redis.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

/* ---- the URL ------------------------------------------------------------------------------ */

/* redis://[:PASSWORD@]HOST:PORT[/DB]; 0 or -1. */
static int parse_url(const char *url, ag_jobs_redis *R) {
    static const char scheme[] = "redis://";
    if (!url || strncmp(url, scheme, sizeof scheme - 1) != 0)
        return -1;
    const char *p = url + sizeof scheme - 1;
    const char *at = strrchr(p, '@');
    if (at) {
        if (p[0] != ':' || (size_t)(at - p - 1) >= sizeof R->password)
            return -1;
        memcpy(R->password, p + 1, (size_t)(at - p - 1));
        p = at + 1;
    }
    const char *colon = strrchr(p, ':');
    if (!colon || colon == p || (size_t)(colon - p) >= sizeof R->host)
        return -1;
    memcpy(R->host, p, (size_t)(colon - p));
    char *end = NULL;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (errno || end == colon + 1 || port < 1 || port > 65535)
        return -1;
    R->port = (int)port;
    if (*end == '/' && end[1]) {
        char *db_end = NULL;
        long db = strtol(end + 1, &db_end, 10);
        if (*db_end || db < 0 || db > 1000000)
            return -1;
        R->db = (int)db;
    } else if (*end && strcmp(end, "/") != 0) {
        return -1;
    }
    return 0;
}

/* ---- connections ------------------------------------------------------------------------- */

static struct timeval ms_tv(int ms) {
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

/* Connect, AUTH, SELECT; NULL with the reason in why. */
static redisContext *connect_to(const ag_jobs_redis *R, int command_ms, char *why, size_t cap) {
    redisContext *c = redisConnectWithTimeout(R->host, R->port, ms_tv(1000));
    if (!c || c->err) {
        snprintf(why, cap, "cannot connect: %s", c ? c->errstr : "out of memory");
        if (c)
            redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, ms_tv(command_ms));
    redisReply *r = NULL;
    if (R->password[0] &&
        (!(r = redisCommand(c, "AUTH %s", R->password)) || r->type == REDIS_REPLY_ERROR)) {
        snprintf(why, cap, "AUTH: %s", r ? r->str : c->errstr);
        goto fail;
    }
    freeReplyObject(r);
    r = NULL;
    if (R->db && (!(r = redisCommand(c, "SELECT %d", R->db)) || r->type == REDIS_REPLY_ERROR)) {
        snprintf(why, cap, "SELECT %d: %s", R->db, r ? r->str : c->errstr);
        goto fail;
    }
    freeReplyObject(r);
    return c;
fail:
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return NULL;
}

static void rconn_init(ag_rconn *k, int command_ms) {
    memset(k, 0, sizeof *k);
    pthread_mutex_init(&k->lock, NULL);
    k->command_ms = command_ms;
}

static void rconn_fini(ag_rconn *k) {
    if (k->c)
        redisFree(k->c);
    k->c = NULL;
    pthread_mutex_destroy(&k->lock);
}

redisReply *ag_rconn_argv(ag_jobs_redis *R, ag_rconn *k, int argc, const char **argv,
                          const size_t *lens) {
    pthread_mutex_lock(&k->lock);
    redisReply *r = NULL;
    uint64_t now = ag_now_us();
    if (!k->c && now >= k->retry_at_us) {
        char why[256];
        k->c = connect_to(R, k->command_ms, why, sizeof why);
        if (!k->c)
            k->retry_at_us = now + 1000000;
    }
    if (k->c) {
        r = redisCommandArgv(k->c, argc, argv, lens);
        int stale = !r && (k->c->err == REDIS_ERR_EOF ||
                           (k->c->err == REDIS_ERR_IO && (errno == ECONNRESET || errno == EPIPE)));
        if (stale) { /* an idle connection Redis closed (it restarted): once more on a new one */
            char why[256];
            redisFree(k->c);
            k->c = connect_to(R, k->command_ms, why, sizeof why);
            r = k->c ? redisCommandArgv(k->c, argc, argv, lens) : NULL;
        }
        if (!k->c) {
            k->retry_at_us = now + 1000000;
        } else if (!r || k->c->err) { /* refused, timed out, or a reply the parser refused */
            if (r)
                freeReplyObject(r);
            r = NULL;
            redisFree(k->c);
            k->c = NULL;
            k->retry_at_us = now + 1000000;
        } else if (r->type == REDIS_REPLY_ERROR) {
            ag_log_event(R->log_format, "warn", "jobs: redis %s: %s", argv[0], r->str);
            freeReplyObject(r);
            r = NULL;
        }
    }
    pthread_mutex_unlock(&k->lock);
    return r;
}

/* ---- the scripts --------------------------------------------------------------------------- */

/* Every script starts with these: ARGV[1..4] are the prefix, the group, this instance and
 * the time (unix seconds); the keys are built from the prefix (one Redis, not a cluster). */
static const char lua_lib[] =
    "local P, G, ME, NOW = ARGV[1], ARGV[2], ARGV[3], ARGV[4]\n"
    "local S = P .. 'stream'\n"
    "local function job(id) return P .. 'job:' .. id end\n"
    "local function count(st, d) if st then redis.call('HINCRBY', P .. 'states', st, d) end end\n"
    "local function owner(e)\n"
    "  local p = redis.call('XPENDING', S, G, e, e, 1)\n"
    "  if #p == 0 then return false end\n"
    "  return p[1][2]\n"
    "end\n"
    "local function release(id)\n"
    "  local c = redis.call('HGET', job(id), 'client')\n"
    "  if c and redis.call('HINCRBY', P .. 'active', c, -1) <= 0 then\n"
    "    redis.call('HDEL', P .. 'active', c) end\n"
    "end\n"
    "local function drop(id)\n"
    "  local b = tonumber(redis.call('HGET', P .. 'held', id) or '0')\n"
    "  redis.call('HDEL', P .. 'held', id)\n"
    "  redis.call('DECRBY', P .. 'spool', b)\n"
    "  redis.call('ZREM', P .. 'uploads', id)\n"
    "end\n"
    "local function hold(id, d)\n"
    "  redis.call('HINCRBY', P .. 'held', id, d)\n"
    "  redis.call('INCRBY', P .. 'spool', d)\n"
    "end\n"
    "local function finish(id, st)\n"
    "  local k = job(id)\n"
    "  count(redis.call('HGET', k, 'state'), -1)\n"
    "  count(st, 1)\n"
    "  release(id)\n"
    "  redis.call('HSET', k, 'state', st, 'finished', NOW)\n"
    "  redis.call('ZADD', P .. 'finished', NOW, id)\n"
    "end\n"
    "local function ack(e)\n"
    "  redis.call('XACK', S, G, e)\n"
    "  redis.call('XDEL', S, e)\n"
    "  redis.call('HDEL', P .. 'entries', e)\n"
    "end\n"
    "local function tail(from) local t = {} for i = from, #ARGV do t[#t + 1] = ARGV[i] end\n"
    "  return t end\n";

/* ARGV 5.. : id, client, per-client bound, then field/value pairs. 0: over the bound. */
static const char lua_submit[] =
    "local id, client, limit = ARGV[5], ARGV[6], tonumber(ARGV[7])\n"
    "if limit > 0 and tonumber(redis.call('HGET', P .. 'active', client) or '0') >= limit then\n"
    "  return 0 end\n"
    "local k = job(id)\n"
    "redis.call('HSET', k, unpack(tail(8)))\n"
    "local seq = redis.call('INCR', P .. 'seq')\n"
    "redis.call('HSET', k, 'state', 'queued', 'seq', seq, 'client', client, 'created', NOW)\n"
    "redis.call('HINCRBY', P .. 'active', client, 1)\n"
    "redis.call('RPUSH', P .. 'q:' .. client, id)\n"
    "redis.call('ZADD', P .. 'clients', 'NX', 0, client)\n"
    "redis.call('ZREM', P .. 'uploads', id)\n"
    "hold(id, tonumber(redis.call('HGET', k, 'bytes') or '0')\n"
    "  - tonumber(redis.call('HGET', P .. 'held', id) or '0'))\n"
    "count('queued', 1)\n"
    "redis.call('XADD', S, '*', 'job', id)\n"
    "return seq\n";

/* ARGV 5, 6: the stream entry this instance was given (new or claimed), --jobs-reclaims.
 * An entry already bound to a job runs that job again (it was taken over, or handed
 * back); a new one takes the oldest job of the client served least recently. An entry of
 * a part of a job cut in segments ("ID#N", "ID#join") runs that part, counted apart. Returns
 * {what, id[, part]}: run, part, failed (reclaimed too often), none (nothing to run, entry
 * acked), or {cancelled, id, ext}: a part of a job DELETE asked to stop (the job removed). */
static const char lua_pick[] =
    "local e, limit = ARGV[5], tonumber(ARGV[6])\n"
    "local id = redis.call('HGET', P .. 'entries', e)\n"
    "local of, part = string.match(id or '', '^([^#]+)#(.+)$')\n"
    "if part then\n"
    "  local k = job(of)\n"
    "  local st = redis.call('HGET', k, 'state')\n"
    "  if st ~= 'running' then ack(e) return {'none', of} end\n"
    "  if redis.call('HGET', k, 'cancel') == '1' then\n"
    "    local ext = redis.call('HGET', k, 'ext') or ''\n"
    "    count(st, -1) release(of) drop(of) redis.call('DEL', k) ack(e)\n"
    "    return {'cancelled', of, ext}\n"
    "  end\n"
    "  local n = redis.call('HINCRBY', k, 'attempts:' .. part, 1)\n"
    "  if n > limit + 1 then\n"
    "    finish(of, 'failed')\n"
    "    redis.call('HSET', k, 'error_code', 'reclaimed', 'error', 'the instances running '\n"
    "      .. 'part ' .. part .. ' of this job stopped ' .. (n - 1) .. ' times '\n"
    "      .. '(--jobs-reclaims ' .. limit .. ')')\n"
    "    ack(e)\n"
    "    return {'failed', of}\n"
    "  end\n"
    "  if n > 1 then redis.call('INCR', P .. 'reclaims') end\n"
    "  redis.call('HSET', k, 'instance', ME)\n"
    "  return {'part', of, part}\n"
    "end\n"
    "if id then\n"
    "  local k = job(id)\n"
    "  local st = redis.call('HGET', k, 'state')\n"
    "  if st ~= 'running' and st ~= 'queued' then ack(e) return {'none', id} end\n"
    "  local n = redis.call('HINCRBY', k, 'attempts', 1)\n"
    "  if n > limit + 1 then\n"
    "    finish(id, 'failed')\n"
    "    redis.call('HSET', k, 'error_code', 'reclaimed', 'error', 'the instances running this '\n"
    "      .. 'job stopped ' .. (n - 1) .. ' times (--jobs-reclaims ' .. limit .. ')')\n"
    "    ack(e)\n"
    "    return {'failed', id}\n"
    "  end\n"
    "  if st ~= 'running' then count(st, -1) count('running', 1) end\n"
    "  redis.call('HSET', k, 'state', 'running', 'instance', ME, 'started', NOW,\n"
    "    'frames_done', 0)\n"
    "  if n > 1 then redis.call('INCR', P .. 'reclaims') end\n"
    "  return {'run', id}\n"
    "end\n"
    "local best, bscore, bseq\n"
    "local cl = redis.call('ZRANGE', P .. 'clients', 0, -1, 'WITHSCORES')\n"
    "for i = 1, #cl, 2 do\n"
    "  local head = redis.call('LINDEX', P .. 'q:' .. cl[i], 0)\n"
    "  if head then\n"
    "    local sc = tonumber(cl[i + 1])\n"
    "    local sq = tonumber(redis.call('HGET', job(head), 'seq') or '0')\n"
    "    if not best or sc < bscore or (sc == bscore and sq < bseq) then\n"
    "      best, bscore, bseq = cl[i], sc, sq end\n"
    "  end\n"
    "end\n"
    "if not best then ack(e) return {'none', ''} end\n"
    "id = redis.call('LPOP', P .. 'q:' .. best)\n"
    "redis.call('ZADD', P .. 'clients', NOW, best)\n"
    "redis.call('HSET', job(id), 'state', 'running', 'instance', ME, 'started', NOW,\n"
    "  'attempts', 1, 'entry', e)\n"
    "redis.call('HSET', P .. 'entries', e, id)\n"
    "count('queued', -1) count('running', 1)\n"
    "return {'run', id}\n";

/* ARGV 5..8[, 9]: entry, id, frames done, frames total[, part]. {held, cancel}: the lease
 * renewed (1), taken over by another instance (0), or the job is gone or over (2: another
 * part failed; the entry is acked). A part's frames add to the job's frames_done. */
static const char lua_renew[] =
    "if owner(ARGV[5]) ~= ME then return {0, '0'} end\n"
    "local k = job(ARGV[6])\n"
    "if redis.call('HGET', k, 'state') ~= 'running' then ack(ARGV[5]) return {2, '0'} end\n"
    "redis.call('XCLAIM', S, G, ME, 0, ARGV[5], 'JUSTID')\n"
    "if ARGV[9] then\n"
    "  local f = 'fd:' .. ARGV[9]\n"
    "  local was = tonumber(redis.call('HGET', k, f) or '0')\n"
    "  redis.call('HINCRBY', k, 'frames_done', tonumber(ARGV[7]) - was)\n"
    "  redis.call('HSET', k, f, ARGV[7], 'beat', NOW)\n"
    "else\n"
    "  redis.call('HSET', k, 'frames_done', ARGV[7], 'frames_total', ARGV[8], 'beat', NOW)\n"
    "end\n"
    "return {1, redis.call('HGET', k, 'cancel') or '0'}\n";

/* ARGV 5..9: entry, id, the number of parts, the cuts ("p0,p1,...": the video stream's
 * time base), the frames in all: the job's entry gives way to one entry per part, at the
 * stream's end. 1, or 0 when the entry is not ours or the job not running. */
static const char lua_split[] =
    "local e, id, n = ARGV[5], ARGV[6], tonumber(ARGV[7])\n"
    "local k = job(id)\n"
    "if owner(e) ~= ME or redis.call('HGET', k, 'state') ~= 'running' then return 0 end\n"
    "redis.call('HSET', k, 'cuts', ARGV[8], 'parts', n, 'parts_left', n, 'frames_total',\n"
    "  ARGV[9], 'frames_done', 0)\n"
    "for i = 0, n - 1 do\n"
    "  local pe = redis.call('XADD', S, '*', 'job', id, 'part', tostring(i))\n"
    "  redis.call('HSET', P .. 'entries', pe, id .. '#' .. i)\n"
    "end\n"
    "ack(e)\n"
    "return 1\n";

/* ARGV 5..8: entry, id, part, its frames: a segment done. After the last one the join is
 * queued (an entry of its own). ok, lost (not ours), gone (the job failed or went), or
 * cancelled (DELETE asked: the job is removed, the caller removes the files). */
static const char lua_part_done[] =
    "local e, id, part = ARGV[5], ARGV[6], ARGV[7]\n"
    "if owner(e) ~= ME then return 'lost' end\n"
    "local k = job(id)\n"
    "local st = redis.call('HGET', k, 'state')\n"
    "if st ~= 'running' then ack(e) return 'gone' end\n"
    "if redis.call('HGET', k, 'cancel') == '1' then\n"
    "  count(st, -1) release(id) drop(id)\n"
    "  redis.call('DEL', k) ack(e) return 'cancelled'\n"
    "end\n"
    "local f = 'fd:' .. part\n"
    "redis.call('HINCRBY', k, 'frames_done', tonumber(ARGV[8]) -\n"
    "  tonumber(redis.call('HGET', k, f) or '0'))\n"
    "redis.call('HSET', k, f, ARGV[8])\n"
    "ack(e)\n"
    "if redis.call('HINCRBY', k, 'parts_left', -1) == 0 then\n"
    "  local je = redis.call('XADD', S, '*', 'job', id, 'part', 'join')\n"
    "  redis.call('HSET', P .. 'entries', je, id .. '#join')\n"
    "end\n"
    "return 'ok'\n";

/* ARGV 5..7: entry, id, the state (done, failed), then field/value pairs. Returns ok, lost
 * (another instance holds it now: nothing written) or cancelled (DELETE asked: the job is
 * gone, the caller removes the files). */
static const char lua_finish[] =
    "local e, id, st = ARGV[5], ARGV[6], ARGV[7]\n"
    "if owner(e) ~= ME then return 'lost' end\n"
    "local k = job(id)\n"
    "local was = redis.call('HGET', k, 'state')\n"
    "if was ~= 'running' then ack(e) return 'gone' end\n"
    "if redis.call('HGET', k, 'cancel') == '1' then\n"
    "  count(was, -1) release(id) drop(id)\n"
    "  redis.call('DEL', k) ack(e) return 'cancelled'\n"
    "end\n"
    "local f = tail(8)\n"
    "if #f > 0 then redis.call('HSET', k, unpack(f)) end\n"
    "finish(id, st)\n"
    "local held = tonumber(redis.call('HGET', k, 'bytes') or '0')\n"
    "hold(id, held - tonumber(redis.call('HGET', P .. 'held', id) or '0'))\n"
    "ack(e)\n"
    "return 'ok'\n";

/* ARGV 5..7[, 8]: entry, id, idle ms[, part]: the job (or one part of it) back to the queue
 * at once (SIGTERM), its entry made as idle as an expired lease so that the next XAUTOCLAIM
 * takes it; not counted a reclaim. */
static const char lua_handback[] =
    "if owner(ARGV[5]) ~= ME then return 0 end\n"
    "local k = job(ARGV[6])\n"
    "if ARGV[8] then\n"
    "  redis.call('HINCRBY', k, 'attempts:' .. ARGV[8], -1)\n"
    "else\n"
    "  redis.call('HINCRBY', k, 'attempts', -1)\n"
    "  redis.call('HSET', k, 'state', 'queued', 'instance', '', 'frames_done', 0)\n"
    "  count('running', -1) count('queued', 1)\n"
    "end\n"
    "redis.call('XCLAIM', S, G, ME, 0, ARGV[5], 'IDLE', ARGV[7], 'JUSTID')\n"
    "return 1\n";

/* ARGV 5: id. {state before, fields...}; {} when there is no such job. A running job gets
 * its cancel flag (its runner stops and removes it); any other is removed here. */
static const char lua_delete[] =
    "local id = ARGV[5]\n"
    "local k = job(id)\n"
    "local h = redis.call('HGETALL', k)\n"
    "if #h == 0 then return {} end\n"
    "local st = redis.call('HGET', k, 'state')\n"
    "if st == 'running' then redis.call('HSET', k, 'cancel', '1') return {st, unpack(h)} end\n"
    "if st == 'queued' then\n"
    "  redis.call('LREM', P .. 'q:' .. (redis.call('HGET', k, 'client') or ''), 0, id)\n"
    "  release(id)\n"
    "else redis.call('ZREM', P .. 'finished', id) end\n"
    "count(st, -1) drop(id)\n"
    "redis.call('DEL', k)\n"
    "return {st, unpack(h)}\n";

/* ARGV 5: id. The job's fields and "ahead": jobs running, and queued with an earlier seq. */
static const char lua_get[] =
    "local k = job(ARGV[5])\n"
    "local h = redis.call('HGETALL', k)\n"
    "if #h == 0 then return h end\n"
    "local ahead = 0\n"
    "if redis.call('HGET', k, 'state') == 'queued' then\n"
    "  local seq = tonumber(redis.call('HGET', k, 'seq') or '0')\n"
    "  ahead = tonumber(redis.call('HGET', P .. 'states', 'running') or '0')\n"
    "  for _, c in ipairs(redis.call('ZRANGE', P .. 'clients', 0, -1)) do\n"
    "    for _, o in ipairs(redis.call('LRANGE', P .. 'q:' .. c, 0, -1)) do\n"
    "      if tonumber(redis.call('HGET', job(o), 'seq') or '0') < seq then ahead = ahead + 1 end\n"
    "    end\n"
    "  end\n"
    "end\n"
    "h[#h + 1] = 'ahead' h[#h + 1] = tostring(ahead)\n"
    "return h\n";

/* ARGV 5: jobs finished before this expire (and clients served before it are forgotten).
 * Returns {id, ext, ...} of the jobs removed (their files are the caller's to remove, once)
 * and of uploads whose instance died (ext ""). */
static const char lua_expire[] =
    "local out = {}\n"
    "for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. 'finished', '-inf', ARGV[5],\n"
    "    'LIMIT', 0, 32)) do\n"
    "  local k = job(id)\n"
    "  redis.call('ZREM', P .. 'finished', id)\n"
    "  count(redis.call('HGET', k, 'state'), -1) drop(id)\n"
    "  out[#out + 1] = id out[#out + 1] = redis.call('HGET', k, 'ext') or ''\n"
    "  redis.call('DEL', k)\n"
    "end\n"
    "for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. 'uploads', '-inf', NOW,\n"
    "    'LIMIT', 0, 32)) do\n"
    "  drop(id) out[#out + 1] = id out[#out + 1] = ''\n"
    "end\n"
    "for _, c in ipairs(redis.call('ZRANGEBYSCORE', P .. 'clients', '-inf', ARGV[5])) do\n"
    "  if redis.call('LLEN', P .. 'q:' .. c) == 0 then redis.call('ZREM', P .. 'clients', c) end\n"
    "end\n"
    "return out\n";

/* ARGV 5..8: id, delta, quota, drop: hold delta more bytes of the spool for the job within
 * the quota (1) or not (0); a negative delta gives back; drop forgets the job's bytes. */
static const char lua_hold[] =
    "local id, d, quota = ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])\n"
    "if ARGV[8] == '1' then drop(id) return 1 end\n"
    "if d > 0 and tonumber(redis.call('GET', P .. 'spool') or '0') + d > quota then return 0 end\n"
    "hold(id, d)\n"
    "return 1\n";

/* ARGV 5..10: id, client, bytes, quota, per-client bound, upload deadline. 1 admitted (the
 * bytes held, the upload registered), 2 over the per-client bound, 3 the spool is full. */
static const char lua_admit[] =
    "local id, client, b, quota, limit = ARGV[5], ARGV[6], tonumber(ARGV[7]),\n"
    "  tonumber(ARGV[8]), tonumber(ARGV[9])\n"
    "if limit > 0 and tonumber(redis.call('HGET', P .. 'active', client) or '0') >= limit then\n"
    "  return 2 end\n"
    "if tonumber(redis.call('GET', P .. 'spool') or '0') + b > quota then return 3 end\n"
    "hold(id, b)\n"
    "redis.call('ZADD', P .. 'uploads', ARGV[10], id)\n"
    "return 1\n";

static const char *const scripts[] = {
    [JR_SUBMIT] = lua_submit, [JR_PICK] = lua_pick,         [JR_RENEW] = lua_renew,
    [JR_FINISH] = lua_finish, [JR_HANDBACK] = lua_handback, [JR_DELETE] = lua_delete,
    [JR_GET] = lua_get,       [JR_EXPIRE] = lua_expire,     [JR_HOLD] = lua_hold,
    [JR_ADMIT] = lua_admit,   [JR_SPLIT] = lua_split,       [JR_PART_DONE] = lua_part_done,
};

redisReply *ag_jobs_redis_eval(ag_jobs *j, ag_rconn *k, ag_jr_script which, int argc,
                               const char **argv) {
    ag_jobs_redis *R = j->redis;
    enum { FIXED = 7, MAX_ARGS = 64 };
    if (argc > MAX_ARGS - FIXED)
        return NULL;
    char now[32];
    snprintf(now, sizeof now, "%.3f", ag_jobs_now_unix());
    const char *args[MAX_ARGS];
    char body[8192];
    snprintf(body, sizeof body, "%s%s", lua_lib, scripts[which]);
    args[0] = "EVAL";
    args[1] = body;
    args[2] = "0";
    args[3] = PREFIX;
    args[4] = GROUP;
    args[5] = R->instance;
    args[6] = now;
    for (int i = 0; i < argc; i++)
        args[FIXED + i] = argv[i];
    return ag_rconn_argv(R, k, FIXED + argc, args, NULL);
}

/* ---- start-up ------------------------------------------------------------------------------ */

static void default_instance(const ag_jobs *j, char *out, size_t cap) {
    char host[200] = "localhost";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    int port = j->server->config.port; /* the listener starts after the runner */
    if (port > 0)
        snprintf(out, cap, "%s:%d", host, port);
    else /* --port 0: any free port, not known yet */
        snprintf(out, cap, "%s:pid%ld", host, (long)getpid());
}

int ag_jobs_redis_open(ag_jobs *j, ag_error *err) {
    const ag_jobs_config *c = j->c;
    ag_jobs_redis *R = ag_calloc(1, sizeof *R);
    if (!R)
        return ag_jobs_set_error(err, AG_E_NOMEM, "out of memory for --jobs-redis");
    j->redis = R;
    R->log_format = j->server->config.log_format;
    rconn_init(&R->api, 500);
    rconn_init(&R->runner, 3000); /* its reads block for 1 s */
    rconn_init(&R->lease, 1000);
    pthread_cond_init(&R->lease_wake, NULL);
    if (parse_url(c->redis_url, R) != 0)
        return ag_jobs_set_error(err, AG_E_ARG,
                                 "--jobs-redis '%.200s' is not redis://[:PASSWORD@]HOST:PORT[/DB]",
                                 c->redis_url);
    if (c->instance && (!c->instance[0] || strlen(c->instance) >= sizeof R->instance))
        return ag_jobs_set_error(err, AG_E_ARG, "--instance-name: 1 to %zu characters",
                                 sizeof R->instance - 1);
    if (c->instance)
        snprintf(R->instance, sizeof R->instance, "%s", c->instance);
    else
        default_instance(j, R->instance, sizeof R->instance);
    char why[256];
    redisContext *rc = connect_to(R, 2000, why, sizeof why);
    if (!rc)
        return ag_jobs_set_error(err, AG_E_IO, "--jobs-redis %s:%d: %s", R->host, R->port, why);
    redisReply *r = redisCommand(rc, "XGROUP CREATE %s %s 0 MKSTREAM", STREAM, GROUP);
    /* also what the runner does when Redis lost the group (restarted without its AOF) */
    int ok = r && (r->type == REDIS_REPLY_STATUS ||
                   (r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "BUSYGROUP", 9)));
    snprintf(why, sizeof why, "%s",
             !r                             ? rc->errstr
             : r->type == REDIS_REPLY_ERROR ? r->str
             : ok                           ? ""
                                            : "an unexpected reply (is this Redis 5 or later?)");
    if (r)
        freeReplyObject(r);
    redisFree(rc);
    if (!ok)
        return ag_jobs_set_error(err, AG_E_IO, "--jobs-redis %s:%d: XGROUP CREATE: %s", R->host,
                                 R->port, why);
    return 0;
}

void ag_jobs_redis_close(ag_jobs *j) {
    ag_jobs_redis *R = j->redis;
    if (!R)
        return;
    rconn_fini(&R->api);
    rconn_fini(&R->runner);
    rconn_fini(&R->lease);
    pthread_cond_destroy(&R->lease_wake);
    ag_free(R);
    j->redis = NULL;
}

/* ---- a job's fields ------------------------------------------------------------------------ */

static int field_int(const char *v) {
    return (int)strtol(v, NULL, 10);
}

static void parse_field(job *b, const char *k, const char *v) {
#define STR(name, dst)                                                                             \
    if (!strcmp(k, name)) {                                                                        \
        snprintf(dst, sizeof dst, "%s", v);                                                        \
        return;                                                                                    \
    }
    STR("id", b->id)
    STR("ext", b->ext)
    STR("client", b->client)
    STR("error_code", b->error_code)
    STR("error", b->error)
    STR("audio", b->audio_note)
    STR("instance", b->instance)
#undef STR
    if (!strcmp(k, "state")) {
        for (int s = JOB_QUEUED; s <= JOB_CANCELLED; s++)
            if (!strcmp(v, ag_job_state_names[s]))
                b->state = (job_state)s;
    } else if (!strcmp(k, "model")) {
        b->model = field_int(v);
    } else if (!strcmp(k, "max_side")) {
        b->max_side = field_int(v);
    } else if (!strcmp(k, "side_by_side")) {
        b->side_by_side = field_int(v);
    } else if (!strcmp(k, "upscale")) {
        b->upscale = field_int(v);
    } else if (!strcmp(k, "restore")) {
        b->restore = field_int(v);
    } else if (!strcmp(k, "codeformer_fidelity")) {
        b->codeformer_fidelity = strtof(v, NULL);
    } else if (!strcmp(k, "width")) {
        b->out_width = field_int(v);
    } else if (!strcmp(k, "height")) {
        b->out_height = field_int(v);
    } else if (!strcmp(k, "max_frames")) {
        b->max_frames = strtoll(v, NULL, 10);
    } else if (!strcmp(k, "frames_done")) {
        b->frames_done = strtoll(v, NULL, 10);
    } else if (!strcmp(k, "frames_total")) {
        b->frames_total = strtoll(v, NULL, 10);
    } else if (!strcmp(k, "created")) {
        b->created_unix = strtod(v, NULL);
    } else if (!strcmp(k, "started")) {
        b->started_unix = strtod(v, NULL);
    } else if (!strcmp(k, "finished")) {
        b->finished_unix = strtod(v, NULL);
    } else if (!strcmp(k, "cancel")) {
        b->remove_when_stopped = field_int(v) == 1;
    } else if (!strcmp(k, "ahead")) {
        b->ahead = field_int(v);
    } else if (!strcmp(k, "attempts")) {
        b->attempts = field_int(v);
    } else if (!strcmp(k, "parts")) {
        b->segments = field_int(v);
    } else if (!strcmp(k, "parts_left")) {
        b->segments_left = field_int(v);
    }
}

void ag_jobs_redis_parse(const redisReply *pairs, size_t from, job *b) {
    memset(b, 0, sizeof *b);
    b->upscale = 1;
    b->codeformer_fidelity = 0.5f;
    for (size_t i = from; i + 1 < pairs->elements; i += 2) {
        const redisReply *k = pairs->element[i], *v = pairs->element[i + 1];
        if (k->type == REDIS_REPLY_STRING && v->type == REDIS_REPLY_STRING)
            parse_field(b, k->str, v->str);
    }
    if (b->upscale < 1 || ag_server_upscale_slot(b->upscale) < 0)
        b->upscale = 1;
    if (b->model < 0)
        b->model = 0;
    if (b->restore < 0 || b->restore > AG_SERVER_MAX_RESTORERS)
        b->restore = 0; /* a job from another version: not restored */
    if (!(b->codeformer_fidelity >= 0 && b->codeformer_fidelity <= 1))
        b->codeformer_fidelity = 0.5f;
    if (b->state == JOB_RUNNING && b->started_unix > 0) { /* the ETA's clock, in ours */
        double ago = ag_jobs_now_unix() - b->started_unix;
        uint64_t now = ag_now_us();
        uint64_t ago_us = ago > 0 ? (uint64_t)(ago * 1e6) : 0;
        b->started_us = ago_us < now ? now - ago_us : 0;
    }
}

/* ---- the HTTP side's calls ------------------------------------------------------------------ */

int ag_jobs_redis_submit(ag_jobs *j, job *b) {
    char f[16][48], limit[16];
    const char *argv[40];
    int n = 0, nf = 0;
    snprintf(limit, sizeof limit, "%d", j->c->per_client);
    argv[n++] = b->id;
    argv[n++] = b->client;
    argv[n++] = limit;
    argv[n++] = "id";
    argv[n++] = b->id;
    argv[n++] = "ext";
    argv[n++] = b->ext;
#define PAIR(key, fmt, value)                                                                      \
    (argv[n++] = key, snprintf(f[nf], sizeof f[nf], fmt, value), argv[n++] = f[nf++])
    PAIR("model", "%d", b->model);
    PAIR("max_side", "%d", b->max_side);
    PAIR("side_by_side", "%d", b->side_by_side);
    PAIR("upscale", "%d", b->upscale > 1 ? b->upscale : 1);
    PAIR("restore", "%d", b->restore);
    PAIR("codeformer_fidelity", "%.6g", (double)b->codeformer_fidelity);
    PAIR("width", "%d", b->out_width);
    PAIR("height", "%d", b->out_height);
    PAIR("max_frames", "%lld", (long long)b->max_frames);
    PAIR("frames_total", "%lld", (long long)b->frames_total);
    PAIR("frames_done", "%d", 0);
    PAIR("bytes", "%zu", b->reserved_bytes + b->file_bytes);
    PAIR("cancel", "%d", 0);
#undef PAIR
    redisReply *r = ag_jobs_redis_eval(j, &j->redis->api, JR_SUBMIT, n, argv);
    if (!r)
        return AG_JR_DOWN;
    int rc = r->type == REDIS_REPLY_INTEGER && r->integer > 0 ? AG_JR_OK
             : r->type == REDIS_REPLY_INTEGER                 ? AG_JR_REFUSED
                                                              : AG_JR_DOWN;
    if (rc == AG_JR_OK)
        b->seq = (uint64_t)r->integer;
    freeReplyObject(r);
    return rc;
}

static int id_arg(const char *id, size_t n, char out[AG_JOB_ID_MAX + 1]) {
    if (n > AG_JOB_ID_MAX || !ag_jobs_valid_id(id, n))
        return -1;
    memcpy(out, id, n);
    out[n] = 0;
    return 0;
}

int ag_jobs_redis_load(ag_jobs *j, const char *id, size_t n, job *out) {
    char key[AG_JOB_ID_MAX + 1];
    if (id_arg(id, n, key) != 0)
        return AG_JR_MISSING;
    const char *argv[] = {key};
    redisReply *r = ag_jobs_redis_eval(j, &j->redis->api, JR_GET, 1, argv);
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        if (r)
            freeReplyObject(r);
        return AG_JR_DOWN;
    }
    int rc = r->elements ? AG_JR_OK : AG_JR_MISSING;
    if (rc == AG_JR_OK)
        ag_jobs_redis_parse(r, 0, out);
    freeReplyObject(r);
    return rc == AG_JR_OK && !out->id[0] ? AG_JR_MISSING : rc;
}

int ag_jobs_redis_delete(ag_jobs *j, const char *id, size_t n, job *out, int *cancelling) {
    char key[AG_JOB_ID_MAX + 1];
    *cancelling = 0;
    if (id_arg(id, n, key) != 0)
        return AG_JR_MISSING;
    const char *argv[] = {key};
    redisReply *r = ag_jobs_redis_eval(j, &j->redis->api, JR_DELETE, 1, argv);
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        if (r)
            freeReplyObject(r);
        return AG_JR_DOWN;
    }
    int rc = r->elements ? AG_JR_OK : AG_JR_MISSING;
    if (rc == AG_JR_OK) {
        ag_jobs_redis_parse(r, 1, out);
        *cancelling = out->state == JOB_RUNNING;
        if (out->state == JOB_RUNNING)
            out->remove_when_stopped = 1;
        else if (out->state == JOB_QUEUED)
            out->state = JOB_CANCELLED;
    }
    freeReplyObject(r);
    if (rc == AG_JR_OK && !*cancelling && out->id[0])
        ag_jobs_remove_files(j, out);
    return rc;
}

static int integer_reply(redisReply *r, long long *value) {
    int ok = r && r->type == REDIS_REPLY_INTEGER;
    if (ok)
        *value = r->integer;
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

int ag_jobs_redis_admit(ag_jobs *j, const char *id, const char *client, size_t bytes, int *why) {
    char b[32], quota[32], limit[16], deadline[32];
    snprintf(b, sizeof b, "%zu", bytes);
    snprintf(quota, sizeof quota, "%zu", j->c->quota_bytes);
    snprintf(limit, sizeof limit, "%d", j->c->per_client);
    /* an upload whose instance dies is forgotten after the longest an upload may take */
    const ag_server_config *c = &j->server->config;
    double upload_s =
        c->timeout_s +
        (c->min_upload_rate ? (double)j->c->max_bytes / (double)c->min_upload_rate : 3600.0);
    snprintf(deadline, sizeof deadline, "%.3f", ag_jobs_now_unix() + upload_s + 60);
    const char *argv[] = {id, client, b, quota, limit, deadline};
    long long v = 0;
    if (integer_reply(ag_jobs_redis_eval(j, &j->redis->api, JR_ADMIT, 6, argv), &v) != 0)
        return AG_JR_DOWN;
    *why = v == 2 ? 1 : v == 3 ? 2 : 0;
    return v == 1 ? AG_JR_OK : AG_JR_REFUSED;
}

int ag_jobs_redis_hold(ag_jobs *j, const char *id, long long delta, int drop) {
    char d[32], quota[32];
    snprintf(d, sizeof d, "%lld", delta);
    snprintf(quota, sizeof quota, "%zu", j->c->quota_bytes);
    const char *argv[] = {id, d, quota, drop ? "1" : "0"};
    long long v = 0;
    if (integer_reply(ag_jobs_redis_eval(j, &j->redis->api, JR_HOLD, 4, argv), &v) != 0)
        return AG_JR_DOWN;
    return v == 1 ? AG_JR_OK : AG_JR_REFUSED;
}

/* ---- metrics ------------------------------------------------------------------------------- */

static redisReply *command(ag_jobs_redis *R, const char *a, const char *b, const char *c) {
    const char *argv[] = {a, b, c};
    return ag_rconn_argv(R, &R->api, c ? 3 : 2, argv, NULL);
}

/* The value of `name` in a flat [name, value, ...] array reply (XINFO GROUPS' group). */
static long long array_field(const redisReply *a, const char *name) {
    for (size_t i = 0; a && a->type == REDIS_REPLY_ARRAY && i + 1 < a->elements; i += 2)
        if (a->element[i]->type == REDIS_REPLY_STRING && !strcmp(a->element[i]->str, name))
            return a->element[i + 1]->type == REDIS_REPLY_INTEGER
                       ? a->element[i + 1]->integer
                       : -1; /* lag is nil when Redis cannot tell */
    return -1;
}

void ag_jobs_redis_metrics(ag_jobs *j, ag_text *t) {
    ag_jobs_redis *R = j->redis;
    long long length = -1, pending = -1, lag = -1, reclaims = 0, spool = 0;
    int up = integer_reply(command(R, "XLEN", STREAM, NULL), &length) == 0;
    redisReply *groups = up ? command(R, "XINFO", "GROUPS", STREAM) : NULL;
    for (size_t i = 0; groups && groups->type == REDIS_REPLY_ARRAY && i < groups->elements; i++) {
        const redisReply *g = groups->element[i];
        for (size_t k = 0; g->type == REDIS_REPLY_ARRAY && k + 1 < g->elements; k += 2)
            if (g->element[k]->type == REDIS_REPLY_STRING && !strcmp(g->element[k]->str, "name") &&
                g->element[k + 1]->type == REDIS_REPLY_STRING &&
                !strcmp(g->element[k + 1]->str, GROUP)) {
                pending = array_field(g, "pending");
                lag = array_field(g, "lag");
            }
    }
    if (groups)
        freeReplyObject(groups);
    redisReply *r = up ? command(R, "GET", PREFIX "reclaims", NULL) : NULL;
    if (r && r->type == REDIS_REPLY_STRING)
        reclaims = strtoll(r->str, NULL, 10);
    if (r)
        freeReplyObject(r);
    r = up ? command(R, "GET", PREFIX "spool", NULL) : NULL;
    if (r && r->type == REDIS_REPLY_STRING)
        spool = strtoll(r->str, NULL, 10);
    if (r)
        freeReplyObject(r);
    ag_text_printf(t,
                   "# HELP animegan_jobs_redis_up 1 when this instance reaches the jobs' Redis.\n"
                   "# TYPE animegan_jobs_redis_up gauge\nanimegan_jobs_redis_up %d\n",
                   up);
    if (!up)
        return;
    ag_text_printf(t,
                   "# HELP animegan_jobs_stream_length Entries in the jobs' stream (queued and "
                   "running jobs).\n# TYPE animegan_jobs_stream_length gauge\n"
                   "animegan_jobs_stream_length %lld\n"
                   "# HELP animegan_jobs_stream_pending Entries delivered to a runner and not "
                   "finished (running jobs).\n# TYPE animegan_jobs_stream_pending gauge\n"
                   "animegan_jobs_stream_pending %lld\n"
                   "# HELP animegan_jobs_stream_lag Entries no runner has read yet (queued "
                   "jobs).\n# TYPE animegan_jobs_stream_lag gauge\n"
                   "animegan_jobs_stream_lag %lld\n"
                   "# HELP animegan_jobs_reclaims_total Jobs taken over after their instance "
                   "died, in the cluster.\n# TYPE animegan_jobs_reclaims_total counter\n"
                   "animegan_jobs_reclaims_total %lld\n"
                   "# HELP animegan_jobs_cluster_spool_bytes Bytes of the shared spool held, "
                   "files and reservations.\n# TYPE animegan_jobs_cluster_spool_bytes gauge\n"
                   "animegan_jobs_cluster_spool_bytes %lld\n",
                   length, pending, lag, reclaims, spool);
    r = command(R, "HGETALL", PREFIX "states", NULL);
    ag_text_printf(t, "# HELP animegan_jobs_cluster Jobs in the cluster, by state.\n"
                      "# TYPE animegan_jobs_cluster gauge\n");
    for (int s = JOB_QUEUED; s <= JOB_FAILED; s++) {
        long long v = 0;
        for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2)
            if (r->element[i]->type == REDIS_REPLY_STRING &&
                !strcmp(r->element[i]->str, ag_job_state_names[s]) &&
                r->element[i + 1]->type == REDIS_REPLY_STRING)
                v = strtoll(r->element[i + 1]->str, NULL, 10);
        ag_text_printf(t, "animegan_jobs_cluster{state=\"%s\"} %lld\n", ag_job_state_names[s], v);
    }
    if (r)
        freeReplyObject(r);
    ag_text_printf(t,
                   "# HELP animegan_jobs_taken_over_total Jobs this instance took over, handed "
                   "back (SIGTERM) and lost to another.\n"
                   "# TYPE animegan_jobs_taken_over_total counter\n"
                   "animegan_jobs_taken_over_total{how=\"reclaimed\"} %llu\n"
                   "animegan_jobs_taken_over_total{how=\"handed_back\"} %llu\n"
                   "animegan_jobs_taken_over_total{how=\"lost\"} %llu\n",
                   (unsigned long long)atomic_load(&R->reclaimed),
                   (unsigned long long)atomic_load(&R->handed_back),
                   (unsigned long long)atomic_load(&R->lost));
}
