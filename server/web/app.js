// The web page: pick or drop a photo, choose a style, upload it to POST /api/v1/convert
// (raw bytes), show where it is (uploading, waiting in the queue, working) by polling
// /api/v1/status?request_id=..., then before/after and a download link. No network access
// beyond this server: the Content-Security-Policy forbids it anyway.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const el = {
    drop: $("drop"), file: $("file"), preview: $("preview"), dropEmpty: $("drop-empty"),
    model: $("model"), format: $("format"), portrait: $("portrait"), go: $("go"),
    status: $("status"), error: $("error"), limits: $("limits"),
    result: $("result"), compare: $("compare"), side: $("side"), slider: $("slider"),
    before: $("before"), after: $("after"), afterClip: $("after-clip"),
    before2: $("before2"), after2: $("after2"), timing: $("timing"),
    download: $("download"), again: $("again"),
    viewSlider: $("view-slider"), viewSide: $("view-side"),
  };

  let photo = null;         // the File chosen
  let photoUrl = null;      // object URL of the photo
  let resultUrl = null;     // object URL of the result
  let busy = false;
  let maxUploadBytes = 10 * 1024 * 1024;
  let maxPixels = 0;

  const mb = (bytes) => (bytes / 1048576).toFixed(bytes < 10 * 1048576 ? 1 : 0) + " MB";

  function setStatus(state, text) {
    el.status.dataset.state = state;
    el.status.textContent = text;
  }

  function showError(text) {
    el.error.textContent = text;
    el.error.hidden = !text;
  }

  // Plain words for every way a conversion can fail.
  function explain(status, body, retryAfter) {
    const code = body && body.error ? body.error.code : "";
    const wait = retryAfter ? ` in ${retryAfter} second${retryAfter === "1" ? "" : "s"}` : " in a moment";
    switch (status) {
      case 413:
        if (code === "too_many_pixels")
          return `That photo has too many pixels (the limit is ${(maxPixels / 1e6).toFixed(1)} megapixels). Try a smaller one.`;
        return `That photo is too large (the limit is ${mb(maxUploadBytes)}). Try a smaller one.`;
      case 415:
        return "That file is not an image we can read. Try a JPEG, PNG or WebP photo.";
      case 422:
        return "That image seems to be damaged: we could not open it. Try another photo.";
      case 503:
        if (code === "shutting_down") return `The server is restarting. Try again${wait}.`;
        return `The server is busy right now. Try again${wait}.`;
      case 504:
        return "The server is very busy and could not start your photo in time. Try again.";
      case 404:
        return "That style is no longer available. Reload the page and pick another.";
      case 400:
        return "The request was not accepted: " + (body && body.error ? body.error.message : "bad request") + ".";
      case 0:
        return "Could not reach the server. Check your connection and try again.";
      default:
        return "Something went wrong on our side. Try again.";
    }
  }

  /* A bundled style has an embedded preview (/style-NAME.jpg: the same cat in every
   * style); a model the server was given without one shows its name only. */
  function addPreview(m, label) {
    const b = document.createElement("button");
    b.type = "button";
    b.className = "style-card";
    b.dataset.model = m.name;
    b.setAttribute("role", "radio");
    b.title = `${label}: ${m.architecture}, ${m.gflop_512} GFLOP at 512x512`;
    const img = document.createElement("img");
    img.src = `/style-${encodeURIComponent(m.name)}.jpg`;
    img.alt = "";
    img.width = img.height = 64;
    img.onerror = () => img.remove();
    const name = document.createElement("span");
    name.textContent = label;
    b.append(img, name);
    b.addEventListener("click", () => {
      el.model.value = m.name;
      markPreview();
    });
    document.getElementById("styles").appendChild(b);
  }

  function markPreview() {
    for (const b of document.querySelectorAll(".style-card"))
      b.setAttribute("aria-checked", String(b.dataset.model === el.model.value));
  }

  el.model.addEventListener("change", () => markPreview());

  async function loadInfo() {
    try {
      const [models, status] = await Promise.all([
        fetch("/api/v1/models").then((r) => r.json()),
        fetch("/api/v1/status").then((r) => r.json()),
      ]);
      el.model.textContent = "";
      for (const m of models.models) {
        const opt = document.createElement("option");
        opt.value = m.name;
        const same = m.style && m.style.toLowerCase() === m.name.toLowerCase();
        opt.textContent = !m.style || same ? m.style || m.name : `${m.style} (${m.name})`;
        if (m.name === models.default) opt.selected = true;
        el.model.appendChild(opt);
        addPreview(m, opt.textContent);
      }
      markPreview();
      maxUploadBytes = status.limits.max_upload_bytes;
      maxPixels = status.limits.max_pixels;
      el.limits.textContent = `JPEG, PNG, WebP, GIF, TIFF or HEIF · up to ${mb(maxUploadBytes)}`;
    } catch (e) {
      el.model.innerHTML = '<option value="">default</option>';
    }
    updateButton();
  }

  function updateButton() {
    el.go.disabled = busy || !photo;
  }

  function choose(file) {
    showError("");
    if (!file) return;
    if (file.size > maxUploadBytes) {
      showError(`That photo is too large (${mb(file.size)}; the limit is ${mb(maxUploadBytes)}). Try a smaller one.`);
      return;
    }
    if (file.type && !file.type.startsWith("image/")) {
      showError("That file is not an image. Pick a JPEG, PNG or WebP photo.");
      return;
    }
    photo = file;
    if (photoUrl) URL.revokeObjectURL(photoUrl);
    photoUrl = URL.createObjectURL(file);
    el.preview.src = photoUrl;
    el.preview.hidden = false;
    el.dropEmpty.hidden = true;
    setStatus("ready", `${file.name || "photo"} · ${mb(file.size)}`);
    updateButton();
  }

  function randomId() {
    const a = new Uint8Array(16); // 128 bits: the server takes ids of 32+ characters as status keys
    crypto.getRandomValues(a);
    return "web-" + Array.from(a, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  // Ask the server where our request is while we wait for the response.
  function pollPosition(id, isDone) {
    let timer = null;
    const tick = async () => {
      if (isDone()) return;
      try {
        const s = await fetch("/api/v1/status?request_id=" + encodeURIComponent(id)).then((r) => r.json());
        if (isDone()) return;
        const r = s.request || {};
        if (r.state === "queued") {
          const ahead = r.position - 1;
          setStatus("queued", ahead > 0
            ? `Waiting in the queue: ${ahead} photo${ahead === 1 ? "" : "s"} ahead of yours…`
            : "Waiting in the queue: yours is next…");
        } else if (r.state === "working") {
          setStatus("working", "Painting your photo…");
        }
      } catch (e) { /* the conversion request reports real failures */ }
      if (!isDone()) timer = setTimeout(tick, 600);
    };
    tick();
    return () => clearTimeout(timer);
  }

  function convert() {
    if (!photo || busy) return;
    busy = true;
    updateButton();
    showError("");
    const id = randomId();
    const params = new URLSearchParams();
    if (el.model.value) params.set("model", el.model.value);
    params.set("portrait", el.portrait.checked ? "1" : "0");
    params.set("format", el.format.value);
    const format = el.format.value;
    const started = performance.now();

    const xhr = new XMLHttpRequest();
    let done = false;
    let stopPolling = () => {};
    xhr.open("POST", "/api/v1/convert?" + params.toString());
    xhr.responseType = "blob";
    xhr.setRequestHeader("Content-Type", photo.type && photo.type.startsWith("image/") ? photo.type : "application/octet-stream");
    xhr.setRequestHeader("X-Request-Id", id);
    xhr.upload.onprogress = (e) => {
      if (e.lengthComputable) setStatus("uploading", `Uploading… ${Math.round((100 * e.loaded) / e.total)}%`);
    };
    xhr.upload.onload = () => {
      setStatus("working", "Uploaded. Starting…");
      stopPolling = pollPosition(id, () => done);
    };
    const finish = () => {
      done = true;
      stopPolling();
      busy = false;
      updateButton();
    };
    xhr.onerror = () => {
      finish();
      setStatus("error", "");
      showError(explain(0));
    };
    xhr.onload = async () => {
      finish();
      if (xhr.status === 200) {
        const seconds = ((performance.now() - started) / 1000).toFixed(1);
        const queueMs = Number(xhr.getResponseHeader("X-Queue-Ms") || 0);
        const inferMs = Number(xhr.getResponseHeader("X-Inference-Ms") || 0);
        showResult(xhr.response, format);
        setStatus("done", `Done in ${seconds} s.`);
        el.timing.textContent = `Waited ${(queueMs / 1000).toFixed(1)} s in the queue, painted in ${(inferMs / 1000).toFixed(1)} s.`;
        return;
      }
      let body = null;
      try { body = JSON.parse(await xhr.response.text()); } catch (e) { /* not JSON */ }
      setStatus("error", "");
      showError(explain(xhr.status, body, xhr.getResponseHeader("Retry-After")));
    };
    setStatus("uploading", "Uploading…");
    xhr.send(photo);
  }

  function showResult(blob, format) {
    if (resultUrl) URL.revokeObjectURL(resultUrl);
    resultUrl = URL.createObjectURL(blob);
    el.before.src = el.before2.src = photoUrl;
    el.after.src = el.after2.src = resultUrl;
    const ext = format === "jpeg" ? "jpg" : format;
    const base = (photo.name || "photo").replace(/\.[^.]*$/, "");
    el.download.href = resultUrl;
    el.download.download = `${base}-anime.${ext}`;
    el.result.hidden = false;
    setSplit(50);
    el.result.scrollIntoView({ behavior: "smooth", block: "start" });
  }

  function setSplit(percent) {
    el.slider.value = String(percent);
    el.afterClip.style.clipPath = `inset(0 0 0 ${percent}%)`;
    el.compare.style.setProperty("--split", percent + "%");
  }

  function setView(side) {
    el.side.hidden = !side;
    el.compare.hidden = side;
    el.viewSide.classList.toggle("active", side);
    el.viewSlider.classList.toggle("active", !side);
    el.viewSide.setAttribute("aria-pressed", String(side));
    el.viewSlider.setAttribute("aria-pressed", String(!side));
  }

  // ---- wiring ----
  el.file.addEventListener("change", () => choose(el.file.files[0]));
  el.drop.addEventListener("click", (e) => { if (e.target.tagName !== "LABEL") el.file.click(); });
  el.drop.addEventListener("keydown", (e) => {
    if (e.key === "Enter" || e.key === " ") { e.preventDefault(); el.file.click(); }
  });
  for (const type of ["dragenter", "dragover"])
    el.drop.addEventListener(type, (e) => { e.preventDefault(); el.drop.classList.add("over"); });
  for (const type of ["dragleave", "drop"])
    el.drop.addEventListener(type, (e) => { e.preventDefault(); el.drop.classList.remove("over"); });
  el.drop.addEventListener("drop", (e) => choose(e.dataTransfer.files[0]));
  el.go.addEventListener("click", convert);
  el.slider.addEventListener("input", () => setSplit(Number(el.slider.value)));
  el.viewSlider.addEventListener("click", () => setView(false));
  el.viewSide.addEventListener("click", () => setView(true));
  el.again.addEventListener("click", () => {
    el.result.hidden = true;
    el.file.value = "";
    el.file.click();
  });

  loadInfo();
})();
