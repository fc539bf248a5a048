#!/usr/bin/env node
/*
 * ort_bench.js - the ONNX Runtime peer of bench/compare.sh: time a generator in
 * onnxruntime-node (CPU execution provider) and print one JSON object: the v2 graph
 * bench/export_onnx.py exports (NCHW), or an AnimeGANv3 .onnx as its author exported it
 * (--layout nhwc).
 *
 *   node bench/peers/ort_bench.js --model bench/results/hayao_512.onnx --runs 5 --threads 2
 *
 * Session: intraOpNumThreads = --threads, interOpNumThreads 1, sequential execution,
 * graphOptimizationLevel 'all', default CPU memory arena. --warmup untimed runs first.
 * The input is the one bench/peers/torch_bench.py builds, read from PREFIX.in.f32 when
 * --check PREFIX is given (then the output is compared with PyTorch's PREFIX.out.f32), else
 * a fixed-seed pattern of the same shape. peak_rss_mb is process.resourceUsage().maxRSS:
 * this whole node process, runtime and model included.
 */
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require(path.join(__dirname, '..', 'node_modules', 'onnxruntime-node'));

function parseArgs(argv) {
    const a = { model: null, size: 512, runs: 5, warmup: 1, threads: 2, check: null, layout: 'nchw' };
    for (let i = 2; i < argv.length; i++) {
        const k = argv[i], v = argv[i + 1];
        if (k === '--model') a.model = v;
        else if (k === '--size') a.size = parseInt(v, 10);
        else if (k === '--runs') a.runs = parseInt(v, 10);
        else if (k === '--warmup') a.warmup = parseInt(v, 10);
        else if (k === '--threads') a.threads = parseInt(v, 10);
        else if (k === '--check') a.check = v;
        else if (k === '--layout') a.layout = v; /* nhwc: AnimeGANv3's own .onnx files */
        else throw new Error(`unknown argument ${k}`);
        i++;
    }
    if (!a.model) throw new Error('--model FILE.onnx is required');
    return a;
}

function readF32(file, count) {
    const buf = fs.readFileSync(file);
    if (buf.length !== count * 4) throw new Error(`${file}: ${buf.length} bytes, want ${count * 4}`);
    const out = new Float32Array(count);
    for (let i = 0; i < count; i++) out[i] = buf.readFloatLE(i * 4);
    return out;
}

function pattern(count) {
    const out = new Float32Array(count);
    let s = 0x9e3779b9;
    for (let i = 0; i < count; i++) {
        s ^= s << 13; s ^= s >>> 17; s ^= s << 5;
        out[i] = ((s >>> 8) / 16777216 - 0.5) * 1.6;
    }
    return out;
}

function median(v) {
    const s = [...v].sort((x, y) => x - y), n = s.length;
    return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

async function main() {
    const a = parseArgs(process.argv);
    const count = 3 * a.size * a.size;
    const t0 = performance.now();
    const session = await ort.InferenceSession.create(a.model, {
        executionProviders: ['cpu'],
        intraOpNumThreads: a.threads,
        interOpNumThreads: 1,
        executionMode: 'sequential',
        graphOptimizationLevel: 'all',
    });
    const loadMs = performance.now() - t0;
    const data = a.check ? readF32(a.check + '.in.f32', count) : pattern(count);
    const dims = a.layout === 'nhwc' ? [1, a.size, a.size, 3] : [1, 3, a.size, a.size];
    const feeds = { [session.inputNames[0]]: new ort.Tensor('float32', data, dims) };
    const ms = [], cpuMs = []; // cpu: the process's CPU time (one thread's time under load)
    let out = null;
    for (let i = 0; i < a.warmup + a.runs; i++) {
        const t = performance.now(), c = process.cpuUsage();
        const r = await session.run(feeds);
        const dt = performance.now() - t, dc = process.cpuUsage(c);
        out = r[session.outputNames[0]].data;
        if (i >= a.warmup) ms.push(dt), cpuMs.push((dc.user + dc.system) / 1e3);
    }
    const result = {
        runtime: 'onnxruntime', version: ort.env.versions.node || ort.env.versions.common,
        size: a.size, precision: 'fp32', threads: a.threads, runs: a.runs, warmup: a.warmup,
        load_ms: +loadMs.toFixed(3), ms: ms.map((v) => +v.toFixed(3)),
        ms_median: +median(ms).toFixed(3), ms_min: +Math.min(...ms).toFixed(3),
        cpu_ms_median: +median(cpuMs).toFixed(3),
        peak_rss_mb: +(process.resourceUsage().maxRSS / 1024).toFixed(1),
    };
    if (a.check) {
        const ref = readF32(a.check + '.out.f32', count);
        let maxAbs = 0;
        for (let i = 0; i < count; i++) maxAbs = Math.max(maxAbs, Math.abs(out[i] - ref[i]));
        result.check_max_abs = +maxAbs.toExponential(3);
    }
    for (let i = 0; i < out.length; i++) {
        if (!Number.isFinite(out[i])) throw new Error('non-finite output');
    }
    process.stdout.write(JSON.stringify(result) + '\n');
}

main().catch((e) => {
    process.stderr.write(`ort_bench: ${e.message}\n`);
    process.exit(1);
});
