// The web page, in tabs: Anime (POST /api/v1/convert), Restore (/api/v1/restore), Upscale
// (/api/v1/upscale), Face fusion (/api/v1/fuse, below) and Video (POST /api/v1/jobs). A photo
// is uploaded as raw bytes; while it waits the page polls /api/v1/status?request_id=... for
// its place in the queue and, once a worker has it, the steps done (faces restored, tiles
// upscaled), drawn as a progress bar. Several photos (a multi-selection or a dropped folder)
// go one after another through a queue with a line each, then come back as one zip. Cancel
// aborts the photo in flight (the server drops a request whose client is gone) or deletes
// the video job. A video is followed by GET /api/v1/jobs/ID (frames done), then played.
// No network access beyond this server: the Content-Security-Policy forbids it anyway.
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
    cancel: $("cancel"), queue: $("queue"), zip: $("zip"), fusion: $("fusion"), pick: $("pick"),
    restorer: $("restorer"), upscaler: $("upscaler"), dropTitle: $("drop-title"),
    fidelity: $("fidelity"), fidelityValue: $("fidelity-value"),
    chooseLabel: $("choose-label"),
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
  let tab = "anime";        // anime | restore | upscale | fuse | video
  let batch = [];           // the photos chosen (several: the queue)
  let current = null;       // {abort()} of the photo or job in flight
  let cancelled = false;
  let zipUrl = null;
  const have = { restorers: false, upscalers: false, codeformer: false };
  let restorerList = [];    // /api/v1/models' restorers, in the order restore=K counts them

  // What each tab does with a photo: its endpoint, button and the download's suffix.
  const TABS = {
    anime: { url: "/api/v1/convert", button: "Animate!", suffix: "anime" },
    restore: { url: "/api/v1/restore", button: "Restore faces", suffix: "restored" },
    upscale: { url: "/api/v1/upscale", button: "Upscale", suffix: "upscaled" },
    video: { url: "/api/v1/jobs", button: "Animate the video", suffix: "anime" },
    fuse: { button: "" },
  };

  function showTab(name, keep) {
    if (busy) return;
    tab = name;
    for (const b of document.querySelectorAll("[data-tab]")) {
      b.classList.toggle("active", b.dataset.tab === name);
      b.setAttribute("aria-selected", String(b.dataset.tab === name));
    }
    el.fusion.hidden = name !== "fuse";
    el.pick.hidden = name === "fuse";
    el.result.hidden = el.videoResult.hidden = true;
    for (const e of document.querySelectorAll("[data-tabs]"))
      e.hidden = !e.dataset.tabs.split(" ").includes(name) || (e.dataset.needs && !have[e.dataset.needs]);
    const video = name === "video";
    el.file.accept = video ? "video/*,image/gif,image/webp" : "image/*";
    el.file.multiple = !video;
    el.dropTitle.textContent = video ? "Drop a video here" : "Drop photos here";
    el.chooseLabel.textContent = video ? "Choose a video" : "Choose photos";
    el.go.textContent = TABS[name].button;
    setFormats(video, false);
    if (!keep) forget();
    drawFaces();
  }

  // Back to no file chosen (switching between photos and video).
  function forget() {
    photo = null;
    batch = [];
    isVideo = false;
    el.file.value = ""; // choosing the same file again is a change
    el.previewBox.hidden = true;
    el.dropEmpty.hidden = false;
    el.queue.hidden = el.zip.hidden = true;
    el.queue.textContent = "";
    faceList = null;
    setStatus("idle", "");
    showError("");
    updateButton();
  }

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

  // The fidelity slider: shown for a CodeFormer restorer only (the others have no w).
  function chosenIsCodeformer() {
    const m = restorerList[Number(el.restorer.value || "1") - 1];
    return !!m && m.architecture === "codeformer";
  }
  el.restorer.addEventListener("change", () => {
    have.codeformer = chosenIsCodeformer();
    $("fidelity-field").hidden = !have.codeformer || !["anime", "restore"].includes(tab);
  });
  el.fidelity.addEventListener("input", () => {
    el.fidelityValue.textContent = (Number(el.fidelity.value) / 100).toFixed(2);
  });

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
      // The server's restorers (--restore-model: restore=K counts them from 1) and upscalers
      // (upscale=N picks the one of that scale), to choose from.
      const restorers = models.restorers || [];
      restorers.forEach((m, i) => {
        const opt = document.createElement("option");
        opt.value = String(i + 1);
        opt.textContent = `${m.name} (${m.architecture}, ${m.face_size} px)`;
        el.restorer.appendChild(opt);
      });
      const upscalers = models.upscalers || [];
      for (const m of upscalers) {
        for (const select of [el.upscale, el.upscaler]) {
          const opt = document.createElement("option");
          opt.value = String(m.upscale);
          opt.textContent = `${m.upscale}x (${m.name})`;
          select.appendChild(opt);
        }
      }
      restorerList = restorers;
      have.restorers = restorers.length > 0;
      have.codeformer = chosenIsCodeformer();
      have.upscalers = upscalers.length > 0;
      $("tab-restore").hidden = !have.restorers;
      $("tab-upscale").hidden = !have.upscalers;
      maxUploadBytes = status.limits.max_upload_bytes;
      maxPixels = status.limits.max_pixels;
      el.limits.textContent = `JPEG, PNG, WebP, GIF, TIFF or HEIF · up to ${mb(maxUploadBytes)}`;
      videoJobs = status.jobs || null; // with video jobs off, no request that would be a 404
      $("tab-video").hidden = !videoJobs;
      if (videoJobs)
        el.limits.textContent += ` · videos up to ${mb(videoJobs.max_video_bytes)}, ${Math.round(videoJobs.max_video_seconds / 60)} min`;
    } catch (e) {
      el.model.innerHTML = '<option value="">default</option>';
    }
    showTab(tab, true);
  }

  function updateButton() {
    el.go.disabled = busy || !(photo || batch.length);
    el.cancel.hidden = !busy;
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

  // Several photos: the queue, one line each, converted one after another.
  function chooseMany(list) {
    forget();
    const images = list.filter((f) => !looksLikeVideo(f) && (!f.type || f.type.startsWith("image/")));
    const big = images.filter((f) => f.size > maxUploadBytes);
    batch = images.filter((f) => f.size <= maxUploadBytes);
    if (list.length > images.length || big.length)
      showError(`Left out: ${list.length - images.length} file(s) that are not photos, ${big.length} over ${mb(maxUploadBytes)}.`);
    el.queue.textContent = "";
    batch.forEach((f) => {
      const li = document.createElement("li");
      li.dataset.state = "waiting";
      li.innerHTML = '<span class="name"></span> <span class="state">waiting</span>';
      li.querySelector(".name").textContent = f.name || "photo";
      el.queue.appendChild(li);
    });
    el.queue.hidden = batch.length === 0;
    setStatus("ready", `${batch.length} photos · ${mb(batch.reduce((n, f) => n + f.size, 0))}`);
    updateButton();
  }

  async function chooseFiles(list) {
    list = Array.from(list || []);
    if (list.length > 1 && tab !== "video") return chooseMany(list);
    return choose(list[0]);
  }

  async function choose(file) {
    showError("");
    if (!file) return;
    batch = [];
    el.queue.hidden = el.zip.hidden = true;
    const animation = !looksLikeVideo(file) && videoJobs !== null && tab === "video" && (await looksAnimated(file));
    if (looksLikeVideo(file) && tab !== "video" && videoJobs) showTab("video");
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
    if (!faceList || tab !== "anime") { el.facesHint.textContent = ""; return; }
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
    // Boxes to click only for the portrait (the one face it crops); paste-back uses them all.
    el.faces.hidden = !el.portrait.checked;
    el.facesHint.textContent = n === 0
      ? (el.portrait.checked ? "No face found: the portrait uses the centre square." : "No face found.")
      : n === 1 ? "1 face found."
      : el.portrait.checked ? `${n} faces found: the portrait uses face ${chosenFace}; click a box to choose another.`
      : `${n} faces found.`;
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
    drawFaces();
  });
  el.paste.addEventListener("change", () => {
    if (el.paste.checked) { el.portrait.checked = false; el.restore.value = "off"; findFaces(); }
    drawFaces();
  });
  el.restore.addEventListener("change", () => {
    if (el.restore.value !== "off") el.portrait.checked = el.paste.checked = false;
  });

  function randomId() {
    const a = new Uint8Array(16); // 128 bits: the server takes ids of 32+ characters as status keys
    crypto.getRandomValues(a);
    return "web-" + Array.from(a, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  // Ask the server where our request is while we wait for the response; once a worker has
  // it, the steps it has done (faces restored, tiles upscaled) fill the progress bar.
  function pollPosition(id, isDone, onStatus) {
    const label = { anime: "Painting your photo", restore: "Restoring the faces", upscale: "Upscaling" }[tab];
    const unit = tab === "upscale" ? "parts" : tab === "restore" && el.upscale.value === "0" ? "faces" : "steps";
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
        } else if (r.state === "working" && r.steps_total > 0) {
          // steps done, and how far the one under way is (one face or tile can take a minute)
          const figure = r.progress !== undefined ? r.progress : r.steps_done / r.steps_total;
          const percent = `${Math.floor(100 * figure)}%`;
          el.progress.hidden = false;
          el.progress.value = figure;
          setStatus("working", `${label}: ${r.steps_done} of ${r.steps_total} ${unit} done · ${percent}…`);
          onStatus(`${r.steps_done} of ${r.steps_total} ${unit} · ${percent}`);
        } else if (r.state === "working") {
          setStatus("working", `${label}…`);
          onStatus("working…");
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
      case 413: {
        const message = code === "too_large" ? body.error.message : "";
        // The result's estimate over --max-job-result-mb: "a gif of N frames ... about X MiB"
        const result = /^a (\w+) of .* would be about (\d+) MiB; the limit is (\d+) MiB/.exec(message);
        if (result)
          return `Saved as ${result[1].toUpperCase()} this video would be about ${result[2]} MB, over the server's ` +
            `${result[3]} MB.` + (/^(gif|webp)$/.test(result[1]) ? " Choose MP4 or WebM (many times smaller), or try a shorter clip."
                                                                  : " Try a shorter clip or no upscaling.");
        return message.includes(" s long")
          ? `That video is too long (the limit is ${Math.round(videoJobs.max_video_seconds / 60)} minutes). Try a shorter one.`
          : "That video is too large. Try a shorter or smaller one.";
      }
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
    if (el.upscale.value !== "0") params.set("upscale", el.upscale.value);
    params.set("format", el.format.value);
    const format = el.format.value;
    const started = performance.now();
    const xhr = new XMLHttpRequest();
    cancelled = false;
    const job = { url: null };
    current = { abort: () => { xhr.abort(); if (job.url) fetch(job.url, { method: "DELETE" }).catch(() => {}); } };
    xhr.open("POST", "/api/v1/jobs?" + params.toString());
    xhr.setRequestHeader("Content-Type", /^(video\/|image\/(gif|webp)$)/.test(photo.type || "") ? photo.type : "application/octet-stream");
    const fail = (text) => {
      busy = false;
      current = null;
      updateButton();
      el.progress.hidden = true;
      setStatus(cancelled ? "cancelled" : "error", cancelled ? "Cancelled." : "");
      showError(cancelled ? "" : text);
    };
    xhr.onabort = () => fail("");
    xhr.upload.onprogress = (e) => {
      if (e.lengthComputable) setStatus("uploading", `Uploading… ${Math.round((100 * e.loaded) / e.total)}%`);
    };
    xhr.onerror = () => fail(explainVideo(0));
    xhr.onload = () => {
      let body = null;
      try { body = JSON.parse(xhr.responseText); } catch (e) { /* not JSON */ }
      if (xhr.status !== 202 || !body) return fail(explainVideo(xhr.status, body, xhr.getResponseHeader("Retry-After")));
      job.url = body.url;
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
      if (cancelled) return fail("");
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
        current = null;
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
    el.videoDownload.download = `${base}-anime${job.upscale > 1 ? `-${job.upscale}x` : ""}.${format}`;
    el.videoInfo.textContent = `${job.frames_done} frames${job.audio ? " · sound: " + job.audio.replace(/^audio \d+: /, "") : ""}`;
    el.result.hidden = true;
    el.videoResult.hidden = false;
    el.videoResult.scrollIntoView({ behavior: "smooth", block: "start" });
  }

  function convert() {
    if (busy) return;
    if (isVideo) return convertVideo();
    const list = batch.length ? batch : photo ? [photo] : [];
    if (list.length) runQueue(list);
  }

  // The query of a photo's request, from the tab's options.
  function requestParams() {
    const params = new URLSearchParams();
    if (tab === "anime") {
      if (el.model.value) params.set("model", el.model.value);
      params.set("portrait", el.portrait.checked ? "face" : "0");
      if (el.portrait.checked && faceList && chosenFace > 1 && chosenFace <= faceList.faces.length)
        params.set("face", String(chosenFace));
      if (el.paste.checked) params.set("paste_faces", "1");
      if (el.restore.value !== "off") params.set("restore", el.restorer.value || "1");
    }
    if (tab === "restore") params.set("restore", el.restorer.value || "1");
    // CodeFormer's w: only for a restorer the server lists as codeformer
    if (params.has("restore") && chosenIsCodeformer())
      params.set("codeformer_fidelity", (Number(el.fidelity.value) / 100).toFixed(2));
    const upscale = tab === "upscale" ? el.upscaler.value : el.upscale.value;
    if (upscale && upscale !== "0") params.set("upscale", upscale);
    params.set("format", el.format.value);
    return params;
  }

  // NAME-anime.png, NAME-restored-2x.jpg, NAME-upscaled-4x.webp: named after what was done.
  function downloadName(file, params) {
    const ext = params.get("format") === "jpeg" ? "jpg" : params.get("format");
    const base = (file.name || "photo").replace(/\.[^.]*$/, "");
    const up = params.get("upscale") ? `-${params.get("upscale")}x` : "";
    return `${base}-${TABS[tab].suffix}${up}.${ext}`;
  }

  // One photo through the tab's endpoint: resolves with the result, rejects with plain words.
  function convertOne(file, onStatus) {
    return new Promise((resolve, reject) => {
      const id = randomId();
      const params = requestParams();
      const started = performance.now();
      const xhr = new XMLHttpRequest();
      let done = false;
      let stopPolling = () => {};
      current = { abort: () => xhr.abort() };
      xhr.open("POST", TABS[tab].url + "?" + params.toString());
      xhr.responseType = "blob";
      xhr.setRequestHeader("Content-Type", file.type && file.type.startsWith("image/") ? file.type : "application/octet-stream");
      xhr.setRequestHeader("X-Request-Id", id);
      xhr.upload.onprogress = (e) => {
        if (e.lengthComputable) setStatus("uploading", `Uploading… ${Math.round((100 * e.loaded) / e.total)}%`);
      };
      xhr.upload.onload = () => {
        setStatus("working", "Uploaded. Starting…");
        stopPolling = pollPosition(id, () => done, onStatus);
      };
      const finish = () => { done = true; stopPolling(); };
      xhr.onabort = () => { finish(); reject(new Error("Cancelled.")); };
      xhr.onerror = () => { finish(); reject(new Error(explain(0))); };
      xhr.onload = async () => {
        finish();
        if (xhr.status === 200)
          return resolve({
            blob: xhr.response, file, name: downloadName(file, params),
            portrait: params.get("portrait") === "face",
            seconds: (performance.now() - started) / 1000,
            queueMs: Number(xhr.getResponseHeader("X-Queue-Ms") || 0),
            inferMs: Number(xhr.getResponseHeader("X-Inference-Ms") || 0),
            faces: xhr.getResponseHeader("X-Faces"), centre: xhr.getResponseHeader("X-Portrait") === "center",
          });
        let body = null;
        try { body = JSON.parse(await xhr.response.text()); } catch (e) { /* not JSON */ }
        reject(new Error(explain(xhr.status, body, xhr.getResponseHeader("Retry-After"))));
      };
      setStatus("uploading", "Uploading…");
      xhr.send(file);
    });
  }

  // The photos one after another, each line saying where it is; several come back as a zip.
  async function runQueue(list) {
    busy = true;
    cancelled = false;
    updateButton();
    showError("");
    el.zip.hidden = true;
    el.result.hidden = true;
    const results = [];
    let lastError = "";
    for (let i = 0; i < list.length && !cancelled; i++) {
      const line = el.queue.children[i];
      const mark = (state, text) => {
        if (!line) return;
        line.dataset.state = state;
        line.querySelector(".state").textContent = text;
      };
      mark("working", "uploading…");
      try {
        const res = await convertOne(list[i], (text) => mark("working", text));
        results.push(res);
        mark("done", `done in ${res.seconds.toFixed(1)} s`);
      } catch (e) {
        lastError = e.message;
        mark(cancelled ? "cancelled" : "failed", cancelled ? "cancelled" : e.message);
      }
    }
    for (let i = results.length; cancelled && i < el.queue.children.length; i++)
      if (el.queue.children[i].dataset.state === "waiting") {
        el.queue.children[i].dataset.state = "cancelled";
        el.queue.children[i].querySelector(".state").textContent = "cancelled";
      }
    busy = false;
    current = null;
    el.progress.hidden = true;
    updateButton();
    if (list.length === 1) {
      if (results.length) return finishOne(results[0]);
      setStatus(cancelled ? "cancelled" : "error", cancelled ? "Cancelled." : "");
      return showError(cancelled ? "" : lastError);
    }
    if (results.length) {
      if (zipUrl) URL.revokeObjectURL(zipUrl);
      zipUrl = URL.createObjectURL(await makeZip(results));
      el.zip.href = zipUrl;
      el.zip.download = `photos-${TABS[tab].suffix}.zip`;
      el.zip.hidden = false;
    }
    setStatus(cancelled ? "cancelled" : "done", `${results.length} of ${list.length} photos done${cancelled ? " (cancelled)" : ""}.`);
  }

  function finishOne(res) {
    showResult(res);
    setStatus("done", `Done in ${res.seconds.toFixed(1)} s.`);
    el.timing.textContent = `Waited ${(res.queueMs / 1000).toFixed(1)} s in the queue, worked ${(res.inferMs / 1000).toFixed(1)} s.`;
    if (res.centre) el.timing.textContent += " No face found: this is the centre square.";
    else if (res.faces !== null) el.timing.textContent += ` ${res.faces} face${res.faces === "1" ? "" : "s"} found.`;
  }

  function showResult(res) {
    if (resultUrl) URL.revokeObjectURL(resultUrl);
    resultUrl = URL.createObjectURL(res.blob);
    el.before.src = el.before2.src = photoUrl;
    el.after.src = el.after2.src = resultUrl;
    el.download.href = resultUrl;
    el.download.download = res.name;
    el.result.hidden = false;
    el.videoResult.hidden = true;
    // A portrait is an aligned crop: side by side with the photo, not overlaid on it.
    el.viewSlider.disabled = res.portrait;
    setView(res.portrait);
    setSplit(50);
    el.result.scrollIntoView({ behavior: "smooth", block: "start" });
  }

  // ---- a zip of the results (stored, no compression: the images are compressed already) ----
  const CRC_TABLE = (() => {
    const t = new Uint32Array(256);
    for (let n = 0; n < 256; n++) {
      let c = n;
      for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
      t[n] = c >>> 0;
    }
    return t;
  })();

  function crc32(bytes) {
    let c = 0xffffffff;
    for (let i = 0; i < bytes.length; i++) c = CRC_TABLE[(c ^ bytes[i]) & 255] ^ (c >>> 8);
    return (c ^ 0xffffffff) >>> 0;
  }

  async function makeZip(results) {
    const parts = [], central = [], used = new Set();
    let offset = 0;
    for (const r of results) {
      let name = r.name;
      for (let k = 2; used.has(name); k++) name = r.name.replace(/(\.[^.]*)$/, `-${k}$1`);
      used.add(name);
      const data = new Uint8Array(await r.blob.arrayBuffer());
      const nameBytes = new TextEncoder().encode(name);
      const crc = crc32(data);
      const local = new DataView(new ArrayBuffer(30));
      const head = new DataView(new ArrayBuffer(46));
      // signature, version, UTF-8 names, stored, 1980-01-01, crc, sizes, name length
      local.setUint32(0, 0x04034b50, true); local.setUint16(4, 20, true); local.setUint16(6, 0x800, true);
      local.setUint16(12, 0x21, true); local.setUint32(14, crc, true);
      local.setUint32(18, data.length, true); local.setUint32(22, data.length, true);
      local.setUint16(26, nameBytes.length, true);
      head.setUint32(0, 0x02014b50, true); head.setUint16(4, 20, true); head.setUint16(6, 20, true);
      head.setUint16(8, 0x800, true); head.setUint16(14, 0x21, true); head.setUint32(16, crc, true);
      head.setUint32(20, data.length, true); head.setUint32(24, data.length, true);
      head.setUint16(28, nameBytes.length, true); head.setUint32(42, offset, true);
      parts.push(local, nameBytes, data);
      central.push(head, nameBytes);
      offset += 30 + nameBytes.length + data.length;
    }
    const size = central.reduce((n, p) => n + p.byteLength, 0);
    const end = new DataView(new ArrayBuffer(22));
    end.setUint32(0, 0x06054b50, true); end.setUint16(8, results.length, true);
    end.setUint16(10, results.length, true); end.setUint32(12, size, true); end.setUint32(16, offset, true);
    return new Blob([...parts, ...central, end], { type: "application/zip" });
  }

  // A drop: files, or folders read through (their images only are kept by chooseMany).
  async function filesFromDrop(dt) {
    const entries = Array.from(dt.items || []).map((i) => i.webkitGetAsEntry && i.webkitGetAsEntry()).filter(Boolean);
    if (!entries.some((e) => e.isDirectory)) return Array.from(dt.files);
    const out = [];
    const walk = async (entry) => {
      if (entry.isFile) out.push(await new Promise((ok, no) => entry.file(ok, no)));
      else if (entry.isDirectory) {
        const reader = entry.createReader();
        for (;;) {
          const some = await new Promise((ok, no) => reader.readEntries(ok, no));
          if (!some.length) break;
          for (const e of some) await walk(e);
        }
      }
    };
    for (const e of entries) await walk(e);
    return out.sort((a, b) => (a.name < b.name ? -1 : 1));
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
  el.file.addEventListener("change", () => chooseFiles(el.file.files));
  el.cancel.addEventListener("click", () => {
    cancelled = true;
    if (current) current.abort();
  });
  for (const b of document.querySelectorAll("[data-tab]")) b.addEventListener("click", () => showTab(b.dataset.tab));
  el.drop.addEventListener("click", (e) => { if (e.target.tagName !== "LABEL") el.file.click(); });
  el.drop.addEventListener("keydown", (e) => {
    if (e.key === "Enter" || e.key === " ") { e.preventDefault(); el.file.click(); }
  });
  for (const type of ["dragenter", "dragover"])
    el.drop.addEventListener(type, (e) => { e.preventDefault(); el.drop.classList.add("over"); });
  for (const type of ["dragleave", "drop"])
    el.drop.addEventListener(type, (e) => { e.preventDefault(); el.drop.classList.remove("over"); });
  el.drop.addEventListener("drop", async (e) => chooseFiles(await filesFromDrop(e.dataTransfer)));
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
    faces: $("fuse-faces"), facesHint: $("fuse-faces-hint"),
    source: $("fuse-source"), target: $("fuse-target"),
    sourceImg: $("fuse-source-img"), targetImg: $("fuse-target-img"),
    sourceDrop: $("fuse-source-drop"), targetDrop: $("fuse-target-drop"),
    ratio: $("fuse-ratio"), ratioValue: $("fuse-ratio-value"), mode: $("fuse-mode"),
    style: $("fuse-style"),
    smooth: $("fuse-smooth"), brightness: $("fuse-brightness"), contrast: $("fuse-contrast"),
    saturation: $("fuse-saturation"), status: $("fuse-status"), error: $("fuse-error"),
    view: $("fuse-view"), before: $("fuse-before"), after: $("fuse-after"),
    download: $("fuse-download"),
    like: $("fuse-like"), likeName: $("fuse-like-name"), likeClear: $("fuse-like-clear"),
  };
  // like: a photo of a person; the server then picks the target face most like it
  // (target_like) and says which in X-Target-Face, which the boxes then show.
  const files = { source: null, target: null, like: null };
  let likeDistance = null;
  let resultUrl = null, timer = null, inflight = null, asked = 0;

  let targetFace = 1, targetFaces = null; // what POST /api/v1/faces found in the target

  // Boxes over the target: click one to fuse into that face (target_face=N).
  function drawTargetFaces() {
    el.faces.textContent = "";
    const list = targetFaces;
    if (!list) { el.facesHint.textContent = ""; return; }
    list.faces.forEach((f, i) => {
      const b = document.createElement("button");
      b.type = "button";
      b.className = "face-box" + (i + 1 === targetFace ? " chosen" : "");
      b.dataset.face = String(i + 1);
      b.title = `Face ${i + 1}`;
      b.setAttribute("aria-pressed", String(i + 1 === targetFace));
      const [x0, y0, x1, y1] = f.box;
      b.style.left = (100 * x0 / list.width) + "%";
      b.style.top = (100 * y0 / list.height) + "%";
      b.style.width = (100 * (x1 - x0) / list.width) + "%";
      b.style.height = (100 * (y1 - y0) / list.height) + "%";
      b.addEventListener("click", (e) => {
        e.stopPropagation();
        e.preventDefault();
        setLike(null); // a face clicked: that choice, not the person's
        targetFace = i + 1;
        drawTargetFaces();
        schedule(0);
      });
      el.faces.appendChild(b);
    });
    const n = list.faces.length;
    const why = files.like && likeDistance !== null
      ? ` (the one most like ${files.like.name}: ${likeDistance.toFixed(2)} apart${likeDistance < 0.6 ? ", the same person" : ", perhaps not the same person"})`
      : "";
    el.facesHint.textContent = n > 1 ? `${n} faces in the target: fusing into face ${targetFace}${why}; click a box to choose another.` : "";
  }

  function setLike(file) {
    files.like = file || null;
    likeDistance = null;
    el.likeName.textContent = file ? file.name : "";
    el.likeClear.hidden = !file;
    if (!file) el.like.value = "";
  }

  async function findTargetFaces(file) {
    targetFaces = null;
    targetFace = 1;
    drawTargetFaces();
    try {
      const r = await fetch("/api/v1/faces", {
        method: "POST", body: file,
        headers: { "Content-Type": file.type && file.type.startsWith("image/") ? file.type : "application/octet-stream" },
      });
      if (r.ok && files.target === file) {
        targetFaces = await r.json();
        drawTargetFaces();
      }
    } catch (e) { /* no boxes: the largest face is used */ }
  }

  function setFile(which, file) {
    if (!file) return;
    files[which] = file;
    const img = which === "source" ? el.sourceImg : el.targetImg;
    if (img.src) URL.revokeObjectURL(img.src);
    img.src = URL.createObjectURL(file);
    img.hidden = false;
    if (which === "target") {
      el.before.src = img.src;
      findTargetFaces(file);
    }
    schedule(0);
  }

  function query() {
    const v = (input) => (Number(input.value) / 100).toFixed(2);
    el.ratioValue.textContent = v(el.ratio);
    return "?ratio=" + v(el.ratio) + "&mode=" + el.mode.value + "&smooth=" + v(el.smooth) +
      "&brightness=" + v(el.brightness) + "&contrast=" + v(el.contrast) +
      "&saturation=" + v(el.saturation) +
      (targetFace > 1 && !files.like ? "&target_face=" + targetFace : "") +
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
    if (files.like) body.append("target_like", files.like);
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
      const chosen = Number(r.headers.get("X-Target-Face"));
      if (files.like && chosen > 0) {
        targetFace = chosen;
        likeDistance = Number(r.headers.get("X-Target-Distance"));
        drawTargetFaces();
      }
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
      // The previous result is not this one's: nothing to show or download.
      el.view.hidden = true;
      el.download.hidden = true;
      el.download.removeAttribute("href");
      el.status.textContent = "";
      el.error.textContent = e.message;
      el.error.hidden = false;
    } finally {
      if (inflight === ctrl) inflight = null;
    }
  }

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
  el.like.addEventListener("change", () => { setLike(el.like.files[0]); schedule(0); });
  el.likeClear.addEventListener("click", () => {
    setLike(null);
    targetFace = 1;
    drawTargetFaces();
    schedule(0);
  });
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
