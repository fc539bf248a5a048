#!/bin/sh
# make_style_thumbnails.sh - the web page's style previews: the centre square of
# tests/data/chelsea.png (public domain, see tests/data/LICENSES.md) at 96 px through every
# bundled style, as server/web/style-<model>.jpg (embedded in the binary by server/web.mk).
# Run from the repository root after `make`.
set -eu
for model in $(ANIMEGAN_MODEL_PATH=models build/animegan models | sed -n 's/^\([a-z0-9-]*\)$/\1/p'); do
    kind=$(ANIMEGAN_MODEL_PATH=models build/animegan models | sed -n "/^$model\$/,/^\$/s/^  kind: *//p")
    [ "$kind" = generator ] || continue
    build/animegan convert tests/data/chelsea.png --model "$model" --portrait --size 96 \
        --quality 82 -o "server/web/style-$model.jpg"
done
ls -l server/web/style-*.jpg
