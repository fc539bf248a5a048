#!/usr/bin/env node
/*
 * make_onnx_golden.js - ONNX Runtime's outputs for the ONNX test models, the independent
 * reference of the importer (tests/test_onnx.c, test_import_matches_ort). For each model and
 * size it writes tests/fixtures/onnx/golden_<model>_<W>x<H>.in.f32 (a seeded NHWC image in
 * [-1, 1]) and .out.f32 (ORT's output, NHWC), raw little-endian float32; an NCHW model is fed
 * the image transposed and its output transposed back.
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
    ['AnimeGANv3_tiny_Cute', 64, 48, 'nhwc'],
    ['mini_v3', 16, 12, 'nhwc'],
    ['mini_v3_fp16', 16, 12, 'nhwc'],
    ['ea_block', 11, 9, 'nhwc'],
    ['torch_style', 16, 12, 'nchw'], /* fed and read back transposed */
    ['inorm', 13, 10, 'nhwc'],
    ['inorm_reciprocal', 13, 10, 'nhwc'],
];

/* (H, W, C) <-> (C, H, W) */
function toChw(a, h, w) {
    const o = new Float32Array(a.length);
    for (let y = 0; y < h; y++)
        for (let x = 0; x < w; x++)
            for (let c = 0; c < 3; c++) o[(c * h + y) * w + x] = a[(y * w + x) * 3 + c];
    return o;
}
function toHwc(a, h, w) {
    const o = new Float32Array(a.length);
    for (let y = 0; y < h; y++)
        for (let x = 0; x < w; x++)
            for (let c = 0; c < 3; c++) o[(y * w + x) * 3 + c] = a[(c * h + y) * w + x];
    return o;
}

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
    for (const [name, w, h, layout] of cases) {
        const sess = await ort.InferenceSession.create(path.join(dir, name + '.onnx'),
                                                       { intraOpNumThreads: 1, interOpNumThreads: 1 });
        const input = image(w, h, w * 1000 + h);
        const nchw = layout === 'nchw';
        const feed = nchw ? new ort.Tensor('float32', toChw(input, h, w), [1, 3, h, w])
                          : new ort.Tensor('float32', input, [1, h, w, 3]);
        const out = (await sess.run({ [sess.inputNames[0]]: feed }))[sess.outputNames[0]];
        const want = nchw ? `1x3x${h}x${w}` : `1x${h}x${w}x3`;
        if (out.dims.join('x') !== want) throw new Error(`${name}: output ${out.dims}`);
        const data = nchw ? toHwc(out.data, h, w) : out.data;
        const prefix = path.join(dir, `golden_${name}_${w}x${h}`);
        fs.writeFileSync(prefix + '.in.f32', Buffer.from(input.buffer));
        fs.writeFileSync(prefix + '.out.f32',
                         Buffer.from(data.buffer, data.byteOffset, data.byteLength));
        console.log(`${prefix}.{in,out}.f32`);
    }
}
main().catch((e) => { console.error(e); process.exit(1); });
