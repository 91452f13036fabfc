// The page: the form's inputs go to the JSON API; the answer's sections and plots are drawn
// as the HTML report draws them. The share link carries the inputs in the URL's fragment.
"use strict";
const FIELDS = ["model", "hardware", "isl", "osl", "batch_size", "weight_dtype", "act_dtype",
  "kv_dtype", "kv_keep", "tp", "pp", "ep", "engine", "cost", "rank_by", "batch_sweep",
  "scheduler", "rate", "num_requests", "max_num_seqs", "seed", "ttft_slo", "tpot_slo"];
const LONG_VIEWS = ["simulate", "plan"];
const state = {view: "estimate", uploads: {}, result: null, seq: 0, job: null, abort: null,
  timer: null, maxUpload: 1 << 20};
const $ = (id) => document.getElementById(id);

function formValues() {
  const values = {};
  for (const name of FIELDS) {
    const el = $(name);
    values[name] = el.type === "checkbox" ? el.checked : el.value;
  }
  return values;
}

function payload() {
  const body = formValues();
  for (const [key, value] of Object.entries(state.uploads)) { body[key] = value; }
  return body;
}

function shareFragment() {
  const params = new URLSearchParams({view: state.view});
  const values = formValues();
  for (const name of FIELDS) {
    const v = values[name];
    params.set(name, v === true ? "1" : v === false ? "0" : v);
  }
  return params.toString();
}

function restore() {
  const params = new URLSearchParams(location.hash.slice(1));
  if (params.has("view")) { state.view = params.get("view"); }
  for (const name of FIELDS) {
    if (!params.has(name)) { continue; }
    const el = $(name);
    if (el.type === "checkbox") { el.checked = params.get(name) === "1"; } else { el.value = params.get(name); }
  }
}

function updateShare() {
  const fragment = shareFragment();
  history.replaceState(null, "", "#" + fragment);
  $("share").href = location.origin + location.pathname + "#" + fragment;
  $("share").title = Object.keys(state.uploads).length ?
    "the link carries the inputs but not the uploaded files" : "a link that restores these inputs";
}

function setStatus(text) { $("status").textContent = text; }

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = !message;
  if (message) {  // the answer below belongs to earlier inputs
    $("result").classList.add("stale");
    $("command").hidden = true;
    $("download-json").disabled = true;
    $("download-report").disabled = true;
  }
}

function fill(select, values, labels) {
  const keep = select.value;
  for (const [i, v] of values.entries()) {
    const option = document.createElement("option");
    option.value = v;
    option.textContent = labels ? labels[i] : v;
    select.appendChild(option);
  }
  if (keep) { select.value = keep; }
}

function drawPlots(root, plots) {
  root.querySelectorAll("div.plot").forEach((div) => {
    const spec = plots[div.id];
    if (!spec) { return; }
    Plotly.newPlot(div, spec.data, spec.layout, {responsive: true, displaylogo: false})
      .then(() => div.setAttribute("data-rendered", "true"));
  });
}

function showResult(answer, command) {
  state.result = answer;
  const root = $("result");
  root.querySelectorAll("div.plot").forEach((div) => Plotly.purge(div));
  root.innerHTML = answer.html;
  root.classList.remove("stale");
  root.setAttribute("data-kind", answer.kind);
  drawPlots(root, answer.plots);
  $("command").textContent = command || answer.command;
  $("command").hidden = false;
  $("download-json").disabled = false;
  $("download-report").disabled = false;
}

async function answerOf(response) {
  let body = null;
  try { body = await response.json(); } catch (err) { body = null; }
  if (!response.ok) {
    throw new Error((body && body.error) || `the server answered ${response.status}`);
  }
  return body;
}

async function cancelJob() {
  if (!state.job) { return; }
  const id = state.job;
  state.job = null;
  $("cancel").disabled = true;
  try { await fetch(`/api/jobs/${id}`, {method: "DELETE"}); } catch (err) { /* gone already */ }
}

async function run() {
  const seq = ++state.seq;
  if (state.abort) { state.abort.abort(); }
  await cancelJob();
  updateShare();
  showError("");
  setStatus("computing…");
  state.abort = new AbortController();
  const long = LONG_VIEWS.includes(state.view);
  try {
    const response = await fetch(`/api/${long ? "jobs" : "view"}/${state.view}`, {
      method: "POST", headers: {"Content-Type": "application/json"},
      body: JSON.stringify(payload()), signal: state.abort.signal});
    const answer = await answerOf(response);
    if (seq !== state.seq) { return; }
    if (long) { await follow(answer.job, answer.command, seq); return; }
    showResult(answer);
    setStatus("");
  } catch (err) {
    if (err.name === "AbortError" || seq !== state.seq) { return; }
    showError(err.message);
    setStatus("");
  }
}

async function follow(id, command, seq) {
  state.job = id;
  $("cancel").disabled = false;
  const started = Date.now();
  while (state.job === id && seq === state.seq) {
    const answer = await answerOf(await fetch(`/api/jobs/${id}`));
    if (answer.state === "done") {
      state.job = null;
      $("cancel").disabled = true;
      showResult(answer, command);
      setStatus("");
      return;
    }
    if (answer.state !== "running") {
      state.job = null;
      $("cancel").disabled = true;
      showError(answer.error || answer.state);
      setStatus("");
      return;
    }
    setStatus(`simulating… ${((Date.now() - started) / 1000).toFixed(0)} s`);
    await new Promise((resolve) => setTimeout(resolve, 400));
  }
}

function schedule() {
  updateShare();
  clearTimeout(state.timer);
  state.timer = setTimeout(run, 450);
}

function download(name, blob) {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
}

async function downloadReport() {
  if (!state.result) { return; }
  try {
    const response = await fetch("/api/report", {method: "POST",
      headers: {"Content-Type": "application/json"},
      body: JSON.stringify({document: state.result.document, command: $("command").textContent})});
    if (!response.ok) { await answerOf(response); }
    download(`phasewise-${state.view}.html`, await response.blob());
  } catch (err) { showError(err.message); }
}

function readUpload(input, key, note) {
  const file = input.files[0];
  if (!file) { return; }
  if (file.size > state.maxUpload) {
    showError(`${file.name} is ${file.size.toLocaleString()} bytes; uploads are limited to ${state.maxUpload.toLocaleString()}.`);
    input.value = "";
    return;
  }
  file.text().then((text) => {
    state.uploads[key] = text;
    if (key === "model_upload") { state.uploads.model_upload_name = file.name; }
    const box = $(note);
    box.hidden = false;
    box.textContent = `using ${file.name} (read in memory) `;
    const clear = document.createElement("button");
    clear.type = "button";
    clear.textContent = "remove";
    clear.onclick = () => {
      delete state.uploads[key];
      if (key === "model_upload") { delete state.uploads.model_upload_name; }
      input.value = "";
      box.hidden = true;
      schedule();
    };
    box.appendChild(clear);
    schedule();
  });
}

async function searchModels() {
  const q = $("model").value;
  try {
    const found = await answerOf(await fetch(`/api/models?q=${encodeURIComponent(q)}`));
    const list = $("model-list");
    list.innerHTML = "";
    for (const name of found.catalog) { list.appendChild(new Option("catalog", name)); }
    for (const name of found.cache) { list.appendChild(new Option("local HF cache", name)); }
  } catch (err) { /* the search is a convenience; the view reports a bad name */ }
}

function selectView(view) {
  state.view = view;
  document.querySelectorAll("#views button").forEach((b) =>
    b.setAttribute("aria-selected", String(b.dataset.view === view)));
  document.querySelectorAll("fieldset[class^=for-]").forEach((el) => {
    el.hidden = !el.classList.contains(`for-${view}`);
  });
}

async function init() {
  const options = await answerOf(await fetch("/api/options"));
  state.maxUpload = options.max_upload_bytes;
  const hardware = $("hardware-list");
  for (const d of options.hardware) { hardware.appendChild(new Option(d.display_name, d.name)); }
  for (const f of options.formats) { $("format-list").appendChild(new Option(f, f)); }
  fill($("engine"), options.engines);
  fill($("rank_by"), options.rank_by);
  fill($("scheduler"), options.schedulers);
  $("scheduler").value = "continuous";
  for (const view of options.views) {
    const button = document.createElement("button");
    button.type = "button";
    button.role = "tab";
    button.dataset.view = view;
    button.textContent = view;
    button.onclick = () => { selectView(view); run(); };
    $("views").appendChild(button);
  }
  restore();
  selectView(options.views.includes(state.view) ? state.view : "estimate");
  $("inputs").addEventListener("input", (e) => { if (e.target.type !== "file") { schedule(); } });
  $("model").addEventListener("input", searchModels);
  $("model-file").addEventListener("change", (e) => readUpload(e.target, "model_upload", "model-upload-note"));
  $("hardware-file").addEventListener("change", (e) => readUpload(e.target, "hardware_upload", "hardware-upload-note"));
  $("run").onclick = run;
  $("cancel").onclick = async () => { state.seq++; await cancelJob(); setStatus("cancelled"); };
  $("download-json").onclick = () => download(`phasewise-${state.view}.json`,
    new Blob([JSON.stringify(state.result.document, null, 2)], {type: "application/json"}));
  $("download-report").onclick = downloadReport;
  searchModels();
  await run();
  document.body.setAttribute("data-ready", "true");
}

init().catch((err) => showError(err.message));
