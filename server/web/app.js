// The web page: pick or drop a photo, choose a style, upload it to POST /api/v1/convert
// (raw bytes), show where it is (uploading, waiting in the queue, working) by polling
// /api/v1/status?request_id=..., then before/after and a download link. No network access
// beyond this server: the Content-Security-Policy forbids it anyway.
// A video (when the server runs video jobs) goes to POST /api/v1/jobs instead: the page polls
// GET /api/v1/jobs/ID for the frames done, then plays the result and offers it for download.
// An animated GIF or WebP is a video too: it can come back as an animated GIF or WebP.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const el = {
    drop: $("drop"), file: $("file"), preview: $("preview"), dropEmpty: $("drop-empty"),
    model: $("model"), format: $("format"), portrait: $("portrait"), go: $("go"),
    restore: $("restore"), restoreField: $("restore-field"),
    upscale: $("upscale"), upscaleField: $("upscale-field"),
    paste: $("paste"), previewBox: $("preview-box"), faces: $("faces"), facesHint: $("faces-hint"),
    status: $("status"), error: $("error"), limits: $("limits"),
    result: $("result"), compare: $("compare"), side: $("side"), slider: $("slider"),
    before: $("before"), after: $("after"), afterClip: $("after-clip"),
    before2: $("before2"), after2: $("after2"), timing: $("timing"),
    download: $("download"), again: $("again"),
    viewSlider: $("view-slider"), viewSide: $("view-side"),
    progress: $("progress"), videoResult: $("video-result"), video: $("video"), anim: $("anim"),
    videoInfo: $("video-info"), videoDownload: $("video-download"), videoAgain: $("video-again"),
  };

  let photo = null;         // the File chosen
  let photoUrl = null;      // object URL of the photo
  let resultUrl = null;     // object URL of the result
  let busy = false;
  let maxUploadBytes = 10 * 1024 * 1024;
  let maxPixels = 0;
  let videoJobs = null;     // {max_video_bytes, max_video_seconds} when the server takes videos
  let isVideo = false;      // the chosen file is a video
  let videoUrl = null;      // object URL of the converted video
  let faceList = null;      // what POST /api/v1/faces found for this photo, null: not asked
  let chosenFace = 1;       // 1 = the largest
  let facesAsked = null;    // the File the faces were asked for

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
      // Face restoration (GPEN / GFPGAN) when the server has a --restore-model.
      const restorers = models.restorers || [];
      el.restoreField.hidden = restorers.length === 0;
      if (restorers.length)
        el.restoreField.title = restorers.map((m) => `${m.name} (${m.architecture}, ${m.face_size} px)`).join(", ");
      // Upscaling (the bundled ESRGAN, or the server's --upscale-model) when it has one.
      const upscalers = models.upscalers || [];
      el.upscaleField.hidden = upscalers.length === 0;
      if (upscalers.length) el.upscaleField.title = upscalers.map((m) => `${m.upscale}x: ${m.name}`).join(", ");
      maxUploadBytes = status.limits.max_upload_bytes;
      maxPixels = status.limits.max_pixels;
      el.limits.textContent = `JPEG, PNG, WebP, GIF, TIFF or HEIF · up to ${mb(maxUploadBytes)}`;
      try {
        const r = await fetch("/api/v1/jobs");
        if (r.ok) videoJobs = await r.json();
      } catch (e) { /* no video jobs here */ }
      if (videoJobs)
        el.limits.textContent += ` · videos up to ${mb(videoJobs.max_video_bytes)}, ${Math.round(videoJobs.max_video_seconds / 60)} min`;
    } catch (e) {
      el.model.innerHTML = '<option value="">default</option>';
    }
    updateButton();
  }

  function updateButton() {
    el.go.disabled = busy || !photo;
  }

  const looksLikeVideo = (file) =>
    (file.type && file.type.startsWith("video/")) || /\.(mp4|m4v|mov|mkv|webm|avi)$/i.test(file.name || "");

  // An animated GIF (its NETSCAPE loop block, or a second frame's control block) or an
  // animated WebP (the animation flag of its VP8X chunk), from the first 64 KiB.
  async function looksAnimated(file) {
    if (!/^image\/(gif|webp)$/.test(file.type || "") && !/\.(gif|webp)$/i.test(file.name || "")) return false;
    const b = new Uint8Array(await file.slice(0, 65536).arrayBuffer());
    const text = (from, n) => String.fromCharCode(...b.subarray(from, from + n));
    if (text(0, 4) === "RIFF" && text(8, 8) === "WEBPVP8X") return (b[20] & 2) !== 0;
    if (text(0, 4) !== "GIF8") return false;
    let controls = 0;
    for (let i = 0; i + 11 < b.length; i++) {
      if (b[i] === 0x21 && b[i + 1] === 0xff && text(i + 3, 11) === "NETSCAPE2.0") return true;
      if (b[i] === 0x21 && b[i + 1] === 0xf9 && b[i + 2] === 4 && ++controls > 1) return true;
    }
    return false;
  }

  // The "Save as" choices follow the kind of file: pictures, video containers, animations.
  function setFormats(video, animation) {
    const animations = [["gif", "GIF (animated)"], ["webp", "WebP (animated)"]];
    const videos = [["mp4", "MP4 (H.264)"], ["webm", "WebM (VP9)"]];
    const wanted = animation ? animations.concat(videos)
                 : video ? videos.concat(animations)
                 : [["png", "PNG"], ["jpeg", "JPEG"], ["webp", "WebP"]];
    if (el.format.options[0] && el.format.options[0].value === wanted[0][0]) return;
    el.format.textContent = "";
    for (const [value, label] of wanted) {
      const opt = document.createElement("option");
      opt.value = value;
      opt.textContent = label;
      el.format.appendChild(opt);
    }
  }

  async function choose(file) {
    showError("");
    if (!file) return;
    const animation = !looksLikeVideo(file) && videoJobs !== null && (await looksAnimated(file));
    if (animation || looksLikeVideo(file)) {
      if (!videoJobs) {
        showError("This server converts photos only. Pick a JPEG, PNG or WebP photo.");
        return;
      }
      if (file.size > videoJobs.max_video_bytes) {
        showError(`That video is too large (${mb(file.size)}; the limit is ${mb(videoJobs.max_video_bytes)}). Try a shorter one.`);
        return;
      }
      isVideo = true;
      photo = file;
      setFormats(true, animation);
      el.previewBox.hidden = true;
      el.dropEmpty.hidden = false;
      el.portrait.disabled = true;
      el.paste.disabled = true;
      faceList = null;
      drawFaces();
      setStatus("ready", `${file.name || "video"} · ${mb(file.size)} · ${animation ? "animation" : "video"}`);
      updateButton();
      return;
    }
    isVideo = false;
    el.portrait.disabled = false;
    el.paste.disabled = false;
    setFormats(false, false);
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
    el.previewBox.hidden = false;
    el.dropEmpty.hidden = true;
    faceList = null;
    facesAsked = null;
    chosenFace = 1;
    drawFaces();
    if (el.portrait.checked || el.paste.checked) findFaces();
    setStatus("ready", `${file.name || "photo"} · ${mb(file.size)}`);
    updateButton();
  }

  // ---- faces: boxes over the preview, one to choose for the portrait ----
  function drawFaces() {
    el.faces.textContent = "";
    if (!faceList) { el.facesHint.textContent = ""; return; }
    const n = faceList.faces.length;
    faceList.faces.forEach((f, i) => {
      const b = document.createElement("button");
      b.type = "button";
      b.className = "face-box" + (i + 1 === chosenFace ? " chosen" : "");
      b.dataset.face = String(i + 1);
      b.title = `Face ${i + 1} (${Math.round(f.score * 100)}%)`;
      b.setAttribute("aria-pressed", String(i + 1 === chosenFace));
      const [x0, y0, x1, y1] = f.box;
      b.style.left = (100 * x0 / faceList.width) + "%";
      b.style.top = (100 * y0 / faceList.height) + "%";
      b.style.width = (100 * (x1 - x0) / faceList.width) + "%";
      b.style.height = (100 * (y1 - y0) / faceList.height) + "%";
      b.addEventListener("click", (e) => {
        e.stopPropagation(); // not the drop zone's file picker
        chosenFace = i + 1;
        drawFaces();
      });
      el.faces.appendChild(b);
    });
    el.facesHint.textContent = n === 0
      ? "No face found: the portrait uses the centre square."
      : n === 1 ? "1 face found."
      : `${n} faces found: the portrait uses face ${chosenFace}; click a box to choose another.`;
  }

  async function findFaces() {
    if (!photo || facesAsked === photo) return;
    const file = photo;
    facesAsked = file;
    el.facesHint.textContent = "Looking for faces…";
    try {
      const r = await fetch("/api/v1/faces", {
        method: "POST", body: file,
        headers: { "Content-Type": file.type && file.type.startsWith("image/") ? file.type : "application/octet-stream" },
      });
      if (file !== photo) return;
      if (!r.ok) { el.facesHint.textContent = ""; facesAsked = null; return; }
      faceList = await r.json();
      drawFaces();
    } catch (e) {
      if (file === photo) { el.facesHint.textContent = ""; facesAsked = null; }
    }
  }

  // The face modes exclude each other: a portrait is a crop, paste-back the whole photo,
  // and restoration works on the whole photo too (the server answers 400 to a mix).
  el.portrait.addEventListener("change", () => {
    if (el.portrait.checked) { el.paste.checked = false; el.restore.value = "off"; findFaces(); }
  });
  el.paste.addEventListener("change", () => {
    if (el.paste.checked) { el.portrait.checked = false; el.restore.value = "off"; findFaces(); }
  });
  el.restore.addEventListener("change", () => {
    if (el.restore.value !== "off") el.portrait.checked = el.paste.checked = false;
  });

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

  // Plain words for a video job that could not start or failed.
  function explainVideo(status, body, retryAfter) {
    const code = body && body.error ? body.error.code : "";
    const wait = retryAfter ? ` in ${Math.ceil(Number(retryAfter) / 60)} minute${retryAfter <= 60 ? "" : "s"}` : " later";
    switch (status) {
      case 413:
        return code === "too_large" && body.error.message.includes(" s long")
          ? `That video is too long (the limit is ${Math.round(videoJobs.max_video_seconds / 60)} minutes). Try a shorter one.`
          : "That video is too large. Try a shorter or smaller one.";
      case 415: return "That file is not a video we can read. Try an MP4, MOV, MKV or WebM clip.";
      case 422: return "That video seems to be damaged: we could not read it. Try another one.";
      case 503:
        if (code === "too_many_jobs") return `The server is busy with other videos. Try again${wait}.`;
        return `The server is busy right now. Try again${wait}.`;
      case 507: return `The server has no room for more videos right now. Try again${wait}.`;
      case 0: return "Could not reach the server. Check your connection and try again.";
      default:
        return "The video could not be converted: " + (body && body.error ? body.error.message : "server error") + ".";
    }
  }

  function convertVideo() {
    busy = true;
    updateButton();
    showError("");
    el.videoResult.hidden = true;
    const params = new URLSearchParams();
    if (el.model.value) params.set("model", el.model.value);
    params.set("format", el.format.value);
    const format = el.format.value;
    const started = performance.now();
    const xhr = new XMLHttpRequest();
    xhr.open("POST", "/api/v1/jobs?" + params.toString());
    xhr.setRequestHeader("Content-Type", /^(video\/|image\/(gif|webp)$)/.test(photo.type || "") ? photo.type : "application/octet-stream");
    const fail = (text) => {
      busy = false;
      updateButton();
      el.progress.hidden = true;
      setStatus("error", "");
      showError(text);
    };
    xhr.upload.onprogress = (e) => {
      if (e.lengthComputable) setStatus("uploading", `Uploading… ${Math.round((100 * e.loaded) / e.total)}%`);
    };
    xhr.onerror = () => fail(explainVideo(0));
    xhr.onload = () => {
      let body = null;
      try { body = JSON.parse(xhr.responseText); } catch (e) { /* not JSON */ }
      if (xhr.status !== 202 || !body) return fail(explainVideo(xhr.status, body, xhr.getResponseHeader("Retry-After")));
      pollJob(body.url, format, started, fail);
    };
    setStatus("uploading", "Uploading…");
    xhr.send(photo);
  }

  // Follow a job until it is done, then fetch the result and play it.
  function pollJob(url, format, started, fail) {
    el.progress.hidden = false;
    el.progress.value = 0;
    const tick = async () => {
      let job;
      try {
        const r = await fetch(url);
        job = await r.json();
        if (!r.ok) return fail(explainVideo(r.status, job));
      } catch (e) {
        setTimeout(tick, 2000); // a blip: the job goes on without us
        return;
      }
      if (job.state === "queued") {
        setStatus("queued", job.jobs_ahead > 0
          ? `Waiting: ${job.jobs_ahead} video${job.jobs_ahead === 1 ? "" : "s"} ahead of yours…`
          : "Waiting: yours is next…");
      } else if (job.state === "running") {
        const total = Math.max(job.frames_total, job.frames_done, 1);
        el.progress.value = job.frames_done / total;
        const eta = job.eta_s !== undefined ? ` · about ${Math.ceil(job.eta_s)} s left` : "";
        setStatus("working", `Painting frame ${job.frames_done} of ${total}${eta}…`);
      } else if (job.state === "done") {
        el.progress.value = 1;
        try {
          const r = await fetch(job.result_url);
          if (!r.ok) return fail(explainVideo(r.status, null));
          showVideo(await r.blob(), format, job);
        } catch (e) {
          return fail(explainVideo(0));
        }
        busy = false;
        updateButton();
        el.progress.hidden = true;
        setStatus("done", `Done in ${((performance.now() - started) / 1000).toFixed(1)} s.`);
        return;
      } else {
        return fail(job.state === "cancelled" ? "The video was cancelled." : explainVideo(500, job));
      }
      setTimeout(tick, 700);
    };
    tick();
  }

  function showVideo(blob, format, job) {
    if (videoUrl) URL.revokeObjectURL(videoUrl);
    videoUrl = URL.createObjectURL(blob);
    const animation = format === "gif" || format === "webp"; // shown by an <img>, not a player
    el.video.hidden = animation;
    el.anim.hidden = !animation;
    if (animation) {
      el.video.removeAttribute("src");
      el.anim.src = videoUrl;
    } else {
      el.anim.removeAttribute("src");
      el.video.src = videoUrl;
    }
    const base = (photo.name || "video").replace(/\.[^.]*$/, "");
    el.videoDownload.href = videoUrl;
    el.videoDownload.download = `${base}-anime.${format}`;
    el.videoInfo.textContent = `${job.frames_done} frames${job.audio ? " · sound: " + job.audio.replace(/^audio \d+: /, "") : ""}`;
    el.result.hidden = true;
    el.videoResult.hidden = false;
    el.videoResult.scrollIntoView({ behavior: "smooth", block: "start" });
  }

  function convert() {
    if (!photo || busy) return;
    if (isVideo) return convertVideo();
    busy = true;
    updateButton();
    showError("");
    const id = randomId();
    const params = new URLSearchParams();
    if (el.model.value) params.set("model", el.model.value);
    params.set("portrait", el.portrait.checked ? "face" : "0");
    if (el.portrait.checked && faceList && chosenFace > 1 && chosenFace <= faceList.faces.length)
      params.set("face", String(chosenFace));
    if (el.paste.checked) params.set("paste_faces", "1");
    const restoreOnly = el.restore.value === "only";
    if (el.restore.value !== "off") params.set("restore", "1");
    if (el.upscale.value !== "0") params.set("upscale", el.upscale.value);
    params.set("format", el.format.value);
    const format = el.format.value;
    const started = performance.now();

    const xhr = new XMLHttpRequest();
    let done = false;
    let stopPolling = () => {};
    xhr.open("POST", (restoreOnly ? "/api/v1/restore?" : "/api/v1/convert?") + params.toString());
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
        const faces = xhr.getResponseHeader("X-Faces");
        if (xhr.getResponseHeader("X-Portrait") === "center")
          el.timing.textContent += " No face found: this is the centre square.";
        else if (faces !== null)
          el.timing.textContent += ` ${faces} face${faces === "1" ? "" : "s"} found.`;
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
    el.videoResult.hidden = true;
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
  el.videoAgain.addEventListener("click", () => {
    el.videoResult.hidden = true;
    el.file.value = "";
    el.file.click();
  });
  el.again.addEventListener("click", () => {
    el.result.hidden = true;
    el.file.value = "";
    el.file.click();
  });

  loadInfo();
})();

// The "Face fusion" tab: a source face and a target photo, POST /api/v1/fuse (multipart
// source + target) with the ratio and adjustments as query parameters; moving a slider
// re-asks after a short pause (the previous request is aborted), so the preview follows.
(function () {
  const $ = (id) => document.getElementById(id);
  const el = {
    tabAnime: $("tab-anime"), tabFuse: $("tab-fuse"), fusion: $("fusion"),
    pick: $("pick"), result: $("result"), videoResult: $("video-result"),
    source: $("fuse-source"), target: $("fuse-target"),
    sourceImg: $("fuse-source-img"), targetImg: $("fuse-target-img"),
    sourceDrop: $("fuse-source-drop"), targetDrop: $("fuse-target-drop"),
    ratio: $("fuse-ratio"), ratioValue: $("fuse-ratio-value"), mode: $("fuse-mode"),
    style: $("fuse-style"),
    smooth: $("fuse-smooth"), brightness: $("fuse-brightness"), contrast: $("fuse-contrast"),
    saturation: $("fuse-saturation"), status: $("fuse-status"), error: $("fuse-error"),
    view: $("fuse-view"), before: $("fuse-before"), after: $("fuse-after"),
    download: $("fuse-download"),
  };
  const files = { source: null, target: null };
  let resultUrl = null, timer = null, inflight = null, asked = 0;

  function showTab(fuse) {
    el.fusion.hidden = !fuse;
    el.pick.hidden = fuse;
    if (fuse) el.result.hidden = el.videoResult.hidden = true;
    el.tabFuse.classList.toggle("active", fuse);
    el.tabAnime.classList.toggle("active", !fuse);
    el.tabFuse.setAttribute("aria-selected", String(fuse));
    el.tabAnime.setAttribute("aria-selected", String(!fuse));
  }

  function setFile(which, file) {
    if (!file) return;
    files[which] = file;
    const img = which === "source" ? el.sourceImg : el.targetImg;
    if (img.src) URL.revokeObjectURL(img.src);
    img.src = URL.createObjectURL(file);
    img.hidden = false;
    if (which === "target") el.before.src = img.src;
    schedule(0);
  }

  function query() {
    const v = (input) => (Number(input.value) / 100).toFixed(2);
    el.ratioValue.textContent = v(el.ratio);
    return "?ratio=" + v(el.ratio) + "&mode=" + el.mode.value + "&smooth=" + v(el.smooth) +
      "&brightness=" + v(el.brightness) + "&contrast=" + v(el.contrast) +
      "&saturation=" + v(el.saturation) +
      (el.style.value ? "&style=" + encodeURIComponent(el.style.value) : "");
  }

  function schedule(delayMs) {
    query();
    clearTimeout(timer);
    if (files.source && files.target) timer = setTimeout(fuse, delayMs);
  }

  async function fuse() {
    if (inflight) inflight.abort();
    const ctrl = new AbortController();
    inflight = ctrl;
    const n = ++asked;
    const body = new FormData();
    body.append("source", files.source);
    body.append("target", files.target);
    el.status.textContent = "Fusing…";
    el.error.hidden = true;
    const started = performance.now();
    try {
      const r = await fetch("/api/v1/fuse" + query(), { method: "POST", body, signal: ctrl.signal });
      if (!r.ok) {
        let message = "The fusion failed (" + r.status + ").";
        try { message = (await r.json()).error.message; } catch (e) { /* not JSON */ }
        throw new Error(message.charAt(0).toUpperCase() + message.slice(1) + ".");
      }
      const blob = await r.blob();
      if (n !== asked) return;
      if (resultUrl) URL.revokeObjectURL(resultUrl);
      resultUrl = URL.createObjectURL(blob);
      el.after.src = resultUrl;
      el.download.href = resultUrl;
      el.download.hidden = false;
      el.view.hidden = false;
      el.status.textContent = "Fused in " + ((performance.now() - started) / 1000).toFixed(1) + " s.";
      el.status.dataset.done = String(n);
    } catch (e) {
      if (e.name === "AbortError") return;
      el.status.textContent = "";
      el.error.textContent = e.message;
      el.error.hidden = false;
    } finally {
      if (inflight === ctrl) inflight = null;
    }
  }

  el.tabAnime.addEventListener("click", () => showTab(false));
  el.tabFuse.addEventListener("click", () => showTab(true));
  for (const which of ["source", "target"]) {
    const input = el[which], drop = which === "source" ? el.sourceDrop : el.targetDrop;
    input.addEventListener("change", () => setFile(which, input.files[0]));
    drop.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") input.click(); });
    for (const type of ["dragenter", "dragover"])
      drop.addEventListener(type, (e) => { e.preventDefault(); drop.classList.add("over"); });
    for (const type of ["dragleave", "drop"])
      drop.addEventListener(type, (e) => { e.preventDefault(); drop.classList.remove("over"); });
    drop.addEventListener("drop", (e) => setFile(which, e.dataTransfer.files[0]));
  }
  for (const input of [el.ratio, el.smooth, el.brightness, el.contrast, el.saturation])
    input.addEventListener("input", () => schedule(250));
  el.mode.addEventListener("change", () => schedule(0));
  el.style.addEventListener("change", () => schedule(0));
  // The styles: the server's models, as the photo tab lists them (style=NAME stylises the
  // fusion after fusing, at most --max-side, as convert does).
  fetch("/api/v1/models").then((r) => r.json()).then((models) => {
    for (const m of models.models) {
      const opt = document.createElement("option");
      const same = m.style && m.style.toLowerCase() === m.name.toLowerCase();
      opt.value = m.name;
      opt.textContent = !m.style || same ? m.style || m.name : `${m.style} (${m.name})`;
      el.style.appendChild(opt);
    }
  }).catch(() => { /* no list: the fusion still works without a style */ });
})();
