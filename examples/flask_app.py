"""A Flask photo-to-anime service over `import animegan` (the engine of animegan.c).

    python3 examples/flask_app.py [--host 127.0.0.1] [--port 8000] [--model hayao]

POST /stylize with the photo as the body (any Content-Type) or as the multipart field
"image"; query ?side_by_side=1, ?format=png|jpg|webp. Returns the picture; errors are JSON
{"error": ..., "message": ...} with 400 (bad photo or option), 413 (too large), 503 (out of
memory) or 500. GET /healthz says which model and precision runs.

What changed from a PyTorch app: the model call. The model is loaded once at start-up; each
request decodes with the library's bounded decoder (EXIF orientation, pixel limit), converts
with the GIL released and encodes. Flask's threaded server may run requests at once: the
Model's `engines` bounds how many convert together (the others wait), and with them the
memory: weights once, one arena per engine.
"""

import argparse

from flask import Flask, jsonify, request

import animegan

MAX_UPLOAD_BYTES = 20 * 1024 * 1024  # refused with 413 by Flask before reading further
MAX_PIXELS = 40_000_000  # a header declaring more is refused before decoding
MAX_SIDE = 1024  # larger photos are downscaled, as `animegan convert` does

MIME = {"png": "image/png", "jpg": "image/jpeg", "webp": "image/webp"}


def create_app(model_name="hayao", engines=1, threads=0):
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = MAX_UPLOAD_BYTES
    model = animegan.Model(model_name, threads=threads, engines=engines)

    def error(status, kind, message):
        return jsonify(error=kind, message=message), status

    @app.get("/healthz")
    def healthz():
        return jsonify(model=model.name, precision=model.precision, engines=model.engines)

    @app.post("/stylize")
    def stylize():
        upload = request.files.get("image")
        data = upload.read() if upload else request.get_data(cache=False)
        fmt = request.args.get("format", "png")
        if fmt not in MIME:
            return error(400, "invalid_argument", "format: expected png, jpg or webp")
        if not data:
            return error(400, "invalid_argument", "no image: send it as the body or as 'image'")
        try:
            photo = animegan.decode(data, max_side=MAX_SIDE, max_pixels=MAX_PIXELS)
            anime = model(photo, side_by_side=request.args.get("side_by_side") == "1")
            body = animegan.encode(anime, fmt, 90)
        except animegan.InputError as e:
            return error(413 if e.code_name == "too_large" else 400, e.code_name, str(e))
        except animegan.OutOfMemoryError as e:
            return error(503, e.code_name, str(e))
        except animegan.Error as e:
            return error(500, getattr(e, "code_name", "internal"), str(e))
        return app.response_class(body, mimetype=MIME[fmt])

    @app.errorhandler(413)
    def too_large(_):
        return error(413, "too_large", f"upload over {MAX_UPLOAD_BYTES} bytes")

    return app


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", default="hayao")
    parser.add_argument("--engines", type=int, default=1)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    app = create_app(args.model, args.engines, args.threads)
    app.run(host=args.host, port=args.port, threaded=True)


if __name__ == "__main__":
    main()
