#!/usr/bin/env node
/*
 * face_identify_reference.js - the golden descriptors of tests/test_face_identify.c: face-api's
 * own FaceRecognitionNet (its code and its original face_recognition_model.bin, not our
 * conversion) run by TensorFlow.js's pure-JS CPU backend on each tests/fixtures/face_identify/
 * crop_K.rgb (150x150 RGB bytes), written as descriptor_K.f32 (128 little-endian float32).
 *
 *   node tools/face_identify_reference.js FACE_API_DIR TFJS_DIR FIXTURE_DIR
 *
 * FACE_API_DIR: the unpacked `npm pack @vladmandic/face-api@1.7.15` (its package/ folder);
 * TFJS_DIR: a folder whose node_modules holds @tensorflow/tfjs@4.22.0 (`npm install`), which
 * face-api's node build is handed in place of @tensorflow/tfjs-node (the native binding, which
 * needs a download): the same kernels face-api's browser build runs on the CPU.
 * tools/make_face_identify_fixtures.sh runs the whole chain.
 */
'use strict';
const fs = require('fs');
const path = require('path');
const Module = require('module');

const [faceApiDir, tfjsDir, fixtureDir] = process.argv.slice(2);
if (!fixtureDir) {
    console.error('usage: face_identify_reference.js FACE_API_DIR TFJS_DIR FIXTURE_DIR');
    process.exit(2);
}
const tfjsPath = require.resolve('@tensorflow/tfjs', {paths: [tfjsDir]});
const resolve = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
    return request === '@tensorflow/tfjs-node' ? tfjsPath : resolve.call(this, request, ...rest);
};
const faceapi = require(path.join(faceApiDir, 'dist', 'face-api.node.js'));
const tf = faceapi.tf;
const SIDE = 150;

async function main() {
    await tf.setBackend('cpu');
    await tf.ready();
    const modelDir = path.join(faceApiDir, 'model');
    const manifest = JSON.parse(
        fs.readFileSync(path.join(modelDir, 'face_recognition_model-weights_manifest.json')));
    const bin = fs.readFileSync(path.join(modelDir, 'face_recognition_model.bin'));
    const weights = tf.io.decodeWeights(bin.buffer.slice(bin.byteOffset, bin.byteOffset + bin.length),
                                        manifest[0].weights);
    const net = faceapi.nets.faceRecognitionNet;
    net.loadFromWeightMap(weights);
    for (let k = 0;; k++) {
        const crop = path.join(fixtureDir, `crop_${k}.rgb`);
        if (!fs.existsSync(crop))
            break;
        const bytes = fs.readFileSync(crop);
        if (bytes.length !== SIDE * SIDE * 3)
            throw new Error(`${crop}: ${bytes.length} bytes`);
        const x = tf.tensor3d(Float32Array.from(bytes), [SIDE, SIDE, 3], 'float32');
        const d = await net.computeFaceDescriptor(x);
        x.dispose();
        const out = path.join(fixtureDir, `descriptor_${k}.f32`);
        fs.writeFileSync(out, Buffer.from(Float32Array.from(d).buffer));
        console.log(`wrote ${out} (tfjs ${tf.version.tfjs}, backend ${tf.getBackend()})`);
    }
}

main().catch((e) => {
    console.error(e);
    process.exit(1);
});
