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

const [faceApiDir, tfjsDir, fixtureDir, photoDir] = process.argv.slice(2);
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

/* A face-api network from its original manifest and .bin. */
function load(net, name) {
    const modelDir = path.join(faceApiDir, 'model');
    const manifest = JSON.parse(fs.readFileSync(path.join(modelDir, `${name}-weights_manifest.json`)));
    const bin = fs.readFileSync(path.join(modelDir, manifest[0].paths[0]));
    net.loadFromWeightMap(tf.io.decodeWeights(
        bin.buffer.slice(bin.byteOffset, bin.byteOffset + bin.length), manifest[0].weights));
}

/* face-api end to end on the decoded photos: the largest face's descriptor. */
async function photos() {
    load(faceapi.nets.ssdMobilenetv1, 'ssd_mobilenetv1_model');
    load(faceapi.nets.faceLandmark68Net, 'face_landmark_68_model');
    for (const f of fs.readdirSync(photoDir).sort()) {
        const m = f.match(/^photo_(\d+)\.(\d+)x(\d+)\.rgb$/);
        if (!m)
            continue;
        const [w, h] = [Number(m[2]), Number(m[3])];
        const x = tf.tensor3d(new Uint8Array(fs.readFileSync(path.join(photoDir, f))), [h, w, 3],
                              'int32');
        const found = await faceapi.detectAllFaces(x).withFaceLandmarks().withFaceDescriptors();
        x.dispose();
        if (!found.length)
            throw new Error(`${f}: face-api found no face`);
        const area = (r) => r.detection.box.width * r.detection.box.height;
        const largest = found.reduce((a, b) => (area(b) > area(a) ? b : a));
        const out = path.join(fixtureDir, `faceapi_${m[1]}.f32`);
        fs.writeFileSync(out, Buffer.from(Float32Array.from(largest.descriptor).buffer));
        console.log(`wrote ${out} (${found.length} face(s))`);
    }
}

async function main() {
    await tf.setBackend('cpu');
    await tf.ready();
    const net = faceapi.nets.faceRecognitionNet;
    load(net, 'face_recognition_model');
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
    if (photoDir)
        await photos();
}

main().catch((e) => {
    console.error(e);
    process.exit(1);
});
