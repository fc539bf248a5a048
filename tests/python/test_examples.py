"""The examples: the Flask app run as a server and sent real HTTP requests; the Gradio app
compiled (and imported only where Gradio is installed)."""

import io
import json
import os
import py_compile
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
from PIL import Image

import animegan
from conftest import DATA, ROOT, THREADS, photo

EXAMPLES = os.path.join(ROOT, "examples")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    pytest.importorskip("flask")
    port = free_port()
    proc = subprocess.Popen([sys.executable, os.path.join(EXAMPLES, "flask_app.py"), "--port",
                             str(port), "--threads", str(THREADS)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while True:
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=5) as r:
                health = json.load(r)
            break
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                pytest.fail("flask_app.py did not start: " + proc.stdout.read().decode())
            time.sleep(0.2)
    yield url, health
    proc.terminate()
    proc.wait(timeout=10)


def post(url, body, content_type="application/octet-stream"):
    req = urllib.request.Request(url, data=body, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, r.headers["Content-Type"], r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read()


def png_bytes(array):
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, "PNG")
    return buf.getvalue()


def test_flask_converts_a_real_request(server, hayao):
    url, health = server
    assert health["model"] == "hayao" and health["precision"] == hayao.precision
    array = photo()
    status, kind, body = post(url + "/stylize", png_bytes(array), "image/png")
    assert status == 200 and kind == "image/png"
    got = np.asarray(Image.open(io.BytesIO(body)))
    assert np.array_equal(got, hayao(array))


def test_flask_multipart_and_options(server):
    url, _ = server
    boundary = "animegan-test-boundary"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"image\"; "
            f"filename=\"p.png\"\r\nContent-Type: image/png\r\n\r\n").encode()
    body += png_bytes(photo()) + f"\r\n--{boundary}--\r\n".encode()
    status, kind, out = post(url + "/stylize?side_by_side=1&format=webp", body,
                             f"multipart/form-data; boundary={boundary}")
    assert status == 200 and kind == "image/webp"
    assert Image.open(io.BytesIO(out)).size == (128, 48)


@pytest.mark.parametrize("body, query, status", [
    (b"not an image at all", "", 400),
    (b"", "", 400),
    (None, "?format=gif", 400),
    (open(os.path.join(DATA, "generated", "size_7x7.png"), "rb").read(), "", 400),
    (open(os.path.join(DATA, "truncated.jpg"), "rb").read(), "", 400),
])
def test_flask_bad_requests_are_json_errors(server, body, query, status):
    url, _ = server
    if body is None:
        body = png_bytes(photo())
    code, kind, out = post(url + "/stylize" + query, body)
    assert code == status and kind == "application/json"
    reply = json.loads(out)
    assert reply["error"] and reply["message"]
    # and the server keeps serving
    assert post(url + "/stylize", png_bytes(photo()))[0] == 200


def test_flask_refuses_a_huge_header_before_decoding(server):
    url, _ = server
    # A 225-byte PNG whose header declares 50000 x 50000 pixels.
    with open(os.path.join(DATA, "generated", "huge_header.png"), "rb") as f:
        huge = f.read()
    code, kind, out = post(url + "/stylize", huge)
    assert code == 413 and json.loads(out)["error"] == "too_large"


def test_gradio_example():
    py_compile.compile(os.path.join(EXAMPLES, "gradio_app.py"), doraise=True)
    pytest.importorskip("gradio")
    sys.path.insert(0, EXAMPLES)
    import gradio_app

    assert "hayao" in gradio_app.STYLES
    out = gradio_app.stylize(photo(), "hayao", False)
    assert out.shape == (48, 64, 3)
