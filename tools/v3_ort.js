#!/usr/bin/env node
/*
 * v3_ort.js - run an AnimeGANv3 .onnx file in ONNX Runtime (onnxruntime-node, CPU) on raw
 * float32 inputs: the ONNX reference of tools/make_v3_fixtures.py and tools/make_v3_onnx.py.
 *
 *   node tools/v3_ort.js MODEL.onnx JOBS.txt
 *
 * JOBS.txt: one job a line, "IN.f32 H W OUT.f32": IN holds the NHWC [1, H, W, 3] float32 input
 * in [-1, 1] (little-endian); OUT receives the first output, float32 NHWC [1, H, W, 3].
 * Session: 2 intra-op threads, sequential, graphOptimizationLevel 'disabled' so the graph runs
 * as the file states it (no fusions). onnxruntime-node comes from bench/node_modules
 * (bench/compare.sh installs it: cd bench && npm ci --ignore-scripts).
 */
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require(path.join(__dirname, '..', 'bench', 'node_modules', 'onnxruntime-node'));

async function main() {
    const [model, jobsFile] = process.argv.slice(2);
    if (!model || !jobsFile) throw new Error('usage: v3_ort.js MODEL.onnx JOBS.txt');
    const session = await ort.InferenceSession.create(model, {
        intraOpNumThreads: 2, interOpNumThreads: 1, executionMode: 'sequential',
        graphOptimizationLevel: 'disabled',
    });
    const input = session.inputNames[0], output = session.outputNames[0];
    const jobs = fs.readFileSync(jobsFile, 'utf8').split('\n').filter((l) => l.trim());
    for (const line of jobs) {
        const [inFile, hs, ws, outFile] = line.trim().split(/\s+/);
        const h = parseInt(hs, 10), w = parseInt(ws, 10);
        const buf = fs.readFileSync(inFile);
        if (buf.length !== h * w * 3 * 4) throw new Error(`${inFile}: ${buf.length} bytes`);
        const data = new Float32Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.length));
        const res = await session.run({ [input]: new ort.Tensor('float32', data, [1, h, w, 3]) });
        const y = res[output];
        if (y.data.length !== h * w * 3) throw new Error(`output dims ${y.dims}`);
        fs.writeFileSync(outFile, Buffer.from(y.data.buffer, y.data.byteOffset, y.data.byteLength));
    }
}

main().catch((e) => { console.error('v3_ort: ' + (e && e.message ? e.message : e)); process.exit(1); });
