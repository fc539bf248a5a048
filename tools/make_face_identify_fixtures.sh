#!/bin/sh
# make_face_identify_fixtures.sh - regenerate tests/fixtures/face_identify/ (test_face_identify's
# golden descriptors): the C crops of real faces (build/tests/test_face_identify --write-crops),
# then face-api's FaceRecognitionNet on them in TF.js (tools/face_identify_reference.js), and
# face-api's whole pipeline on the photos they came from (decoded with PIL into WORK).
# Needs npm (the registry) once: face-api and tfjs are unpacked into WORK (default
# /tmp/face-identify-ref), outside the repository.
#
#   make build/tests/test_face_identify && sh tools/make_face_identify_fixtures.sh [WORK]
set -eu
cd "$(dirname "$0")/.."
work=${1:-/tmp/face-identify-ref}
out=tests/fixtures/face_identify
mkdir -p "$work" "$out"
if [ ! -f "$work/package/model/face_recognition_model.bin" ]; then
    (cd "$work" && npm pack @vladmandic/face-api@1.7.15 && tar xzf vladmandic-face-api-1.7.15.tgz)
fi
if [ ! -d "$work/node_modules/@tensorflow/tfjs" ]; then
    (cd "$work" && npm init -y >/dev/null && npm install @tensorflow/tfjs@4.22.0)
fi
build/tests/test_face_identify --write-crops "$out"
# The photos of the crops, in test_face_identify.c's CROPS order.
k=0
for photo in tests/data/faces/obama.jpg tests/data/faces/biden.jpg tests/data/astronaut.png \
    tests/data/faces/identity/obama_speech.jpg; do
    /usr/bin/python3 -c "
import sys
import numpy as np
from PIL import Image
a = np.asarray(Image.open(sys.argv[1]).convert('RGB'))
a.tofile('%s/photo_%s.%dx%d.rgb' % (sys.argv[2], sys.argv[3], a.shape[1], a.shape[0]))" \
        "$photo" "$work" $k
    k=$((k + 1))
done
node tools/face_identify_reference.js "$work/package" "$work" "$out" "$work"
