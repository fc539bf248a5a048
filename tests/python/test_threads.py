"""One Model from several threads: the same results, at most `engines` arenas, and the GIL
released while the library runs."""

import threading
import time

import numpy as np
import pytest

import animegan
from conftest import photo


def run_threads(model, images, workers):
    results = [None] * len(images)
    errors = []

    def work(k):
        try:
            for i in range(k, len(images), workers):
                results[i] = model(images[i])
        except Exception as e:  # reported below, with the thread's failure
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    return results


@pytest.mark.parametrize("engines", [1, 2])
def test_threads_give_the_serial_results(engines):
    model = animegan.Model("hayao", threads=1, engines=engines)
    sizes = [(64, 48), (40, 40), (48, 64), (64, 48), (32, 56), (40, 40)]
    images = [photo(size=s) for s in sizes]
    want = [model(x) for x in images]
    got = run_threads(model, images, workers=4)
    for w, g in zip(want, got):
        assert np.array_equal(w, g)
    assert model._pool._created <= engines  # the bound on arenas
    assert len(model._pool._idle) == model._pool._created  # every engine returned


def test_gil_released_during_a_conversion():
    model = animegan.Model("hayao", threads=1)
    image = photo(size=(480, 360))  # long enough to tick in, even on AMX (160x120: 15 ms)
    model(image)  # plan the arena first
    done = threading.Event()
    ticks = 0

    def convert():
        model(image)
        done.set()

    t = threading.Thread(target=convert)
    start = time.perf_counter()
    t.start()
    while not done.is_set():
        ticks += 1
        time.sleep(0.001)
    t.join()
    elapsed = time.perf_counter() - start
    # With the GIL held the main thread would not run until the call returned: one tick.
    assert ticks >= 5, (elapsed, ticks)


def test_engine_refuses_a_second_caller():
    """The C engine's busy flag: a caller that bypasses the pool gets an error, not a race."""
    model = animegan.Model("hayao", threads=1)
    engine = model._pool.acquire()
    image = photo(size=(320, 240))
    errors, started = [], threading.Event()

    def convert():
        started.set()
        engine.stylize(image)

    t = threading.Thread(target=convert)
    t.start()
    started.wait()
    deadline = time.time() + 5
    while time.time() < deadline and not errors:
        try:
            engine.stylize(image[:8, :8].copy())
        except RuntimeError as e:
            errors.append(e)
    t.join()
    model._pool.release(engine)
    assert errors and "in use" in str(errors[0])


def test_waiting_callers_wait_for_the_one_engine():
    model = animegan.Model("hayao", threads=1, engines=1)
    image = photo(size=(96, 72))
    active = [0, 0]  # now, most
    lock = threading.Lock()
    real = model._pool.acquire, model._pool.release

    def acquire():
        engine = real[0]()
        with lock:
            active[0] += 1
            active[1] = max(active)
        return engine

    def release(engine):
        with lock:
            active[0] -= 1
        real[1](engine)

    model._pool.acquire, model._pool.release = acquire, release
    run_threads(model, [image] * 4, workers=4)
    assert active[1] == 1
