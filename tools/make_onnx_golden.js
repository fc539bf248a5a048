#!/usr/bin/env node
/*
 * make_onnx_golden.js - ONNX Runtime's outputs for the ONNX test models, the independent
 * reference of the importer (tests/test_onnx.c, test_import_matches_ort). For each model and
 * size it writes tests/fixtures/onnx/golden_<model>_<W>x<H>.in.f32 (a seeded NHWC image in
 * [-1, 1]) and .out.f32 (ORT's NHWC output), raw little-endian float32.
 *
 *   (cd bench && npm ci)    # onnxruntime-node, as for bench/compare.sh
 *   node tools/make_onnx_golden.js
 *
 * ORT_NODE_MODULE=/path/to/onnxruntime-node overrides where the module is found. One
 * intra-op thread, so a rerun gives the same bytes.
 */
'use strict';
const fs = require('fs');
const path = require('path');
const root = path.join(__dirname, '..');
const ort = require(process.env.ORT_NODE_MODULE ||
                    path.join(root, 'bench', 'node_modules', 'onnxruntime-node'));
const dir = path.join(root, 'tests', 'fixtures', 'onnx');

/* Sizes ORT takes (the exported tiny generator needs sides that are multiples of 16). */
const cases = [
    ['AnimeGANv3_tiny_Cute', 64, 48],
    ['mini_v3', 16, 12],
    ['ea_block', 11, 9],
];

function image(w, h, seed) {
    const a = new Float32Array(w * h * 3);
    let s = seed >>> 0;
    for (let i = 0; i < a.length; i++) {
        s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
        a[i] = (s >>> 8) / (1 << 23) - 1;
    }
    return a;
}

async function main() {
    for (const [name, w, h] of cases) {
        const sess = await ort.InferenceSession.create(path.join(dir, name + '.onnx'),
                                                       { intraOpNumThreads: 1, interOpNumThreads: 1 });
        const input = image(w, h, w * 1000 + h);
        const feeds = { [sess.inputNames[0]]: new ort.Tensor('float32', input, [1, h, w, 3]) };
        const out = (await sess.run(feeds))[sess.outputNames[0]];
        if (out.dims.join('x') !== `1x${h}x${w}x3`) throw new Error(`${name}: output ${out.dims}`);
        const prefix = path.join(dir, `golden_${name}_${w}x${h}`);
        fs.writeFileSync(prefix + '.in.f32', Buffer.from(input.buffer));
        fs.writeFileSync(prefix + '.out.f32',
                         Buffer.from(out.data.buffer, out.data.byteOffset, out.data.byteLength));
        console.log(`${prefix}.{in,out}.f32`);
    }
}
main().catch((e) => { console.error(e); process.exit(1); });
