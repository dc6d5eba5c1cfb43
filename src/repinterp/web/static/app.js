// The repinterp viewer: plain JavaScript over the JSON API of docs/web.md.
"use strict";

const state = { info: null, view: "heat", key: null, offset: 0, limit: 12, total: 0, zoomed: null };
const $ = (id) => document.getElementById(id);

// An element with attributes (null ones left out) and children (strings become text, never HTML).
function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value !== null && value !== undefined) node.setAttribute(name, value);
  }
  node.append(...children);
  return node;
}

async function api(url, options = {}) {
  const response = await fetch(url, options);
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.error || `${response.status} ${response.statusText}`);
  return body;
}

function showError(message) {
  $("error").textContent = message || "";
  $("error").hidden = !message;
}

const percent = (x) => `${(100 * x).toFixed(2)}%`;
const className = (c) => state.info.class_names[c] ?? String(c);

// --------------------------------------------------------------------------- pictures and zoom
// What an image shows: its heat map when the view is "heat" and it has one, else the image.
const sourceOf = (img) =>
  state.view === "heat" && img.dataset.heatmap ? img.dataset.heatmap : img.dataset.image;

function showView(img) {
  const source = sourceOf(img);
  if (img.getAttribute("src") !== source) img.src = source;
}

// An image that follows the image / heat-map toggle and opens large when clicked.
function picture(item, caption) {
  const img = el("img", {
    class: "zoomable",
    alt: caption,
    title: `${caption} (click to zoom)`,
    "data-image": item.image,
    "data-heatmap": item.heatmap,
    "data-key": item.key,
    "data-caption": caption,
  });
  showView(img);
  return img;
}

function setView(view) {
  state.view = view;
  for (const radio of document.querySelectorAll("input[name=view]")) {
    radio.checked = radio.value === view;
  }
  document.querySelectorAll("img[data-image]").forEach(showView);
  if (state.zoomed) $("zoom-image").src = sourceOf(state.zoomed);
}

function zoom(img) {
  state.zoomed = img;
  $("zoom-image").src = sourceOf(img);
  $("zoom-image").alt = img.dataset.caption;
  $("zoom-caption").textContent = img.dataset.caption;
  $("zoom-toggle").hidden = !img.dataset.heatmap;
  $("zoom-explain").hidden = !img.dataset.key || img.dataset.key === state.key;
  $("zoom").showModal();
}

// --------------------------------------------------------------------------- explanation
function fact(name, label, value) {
  return [el("dt", {}, label), el("dd", { "data-fact": name }, value)];
}

function render(data) {
  const similar = data.similar;
  Object.assign(state, {
    key: data.key,
    offset: similar.offset,
    limit: similar.limit,
    total: similar.total,
  });
  const title =
    data.source === "reference" ? `Reference image ${data.reference}` : "Uploaded image";
  $("title").textContent = title;
  $("input-pictures").replaceChildren(picture(data, title));
  const facts = [
    fact("class", "Predicted class", `${data.class_name ?? data.predicted_class}`),
    fact("score", "Score", percent(data.score)),
    data.label === null ? [] : fact("label", "True label", className(data.label)),
    fact(
      "representativeness",
      "Representativeness",
      `${data.representativeness} of ${data.n_reference} reference images`,
    ),
    fact("boundaries", "Boundaries |P(x)|", `${data.boundaries.length} of ${state.info.n_boundaries}`),
    fact("delta", "delta = τ(x)", String(data.delta)),
  ];
  $("facts").replaceChildren(...facts.flat());
  $("message").textContent = data.message || "";
  $("message").hidden = !data.message;

  const first = similar.items.length ? similar.offset + 1 : 0;
  $("range").textContent = `(${first}–${similar.offset + similar.items.length} of ${similar.total})`;
  $("similar").replaceChildren(
    ...similar.items.map((item) => {
      const caption = `#${item.rank}: reference image ${item.reference}`;
      return el(
        "figure",
        { class: "card" },
        picture(item, caption),
        el(
          "figcaption",
          {},
          el("a", { href: `#${item.key}`, title: "explain this image" }, `#${item.rank} ref ${item.reference}`),
          el("span", {}, `Dist ${item.distance.toFixed(2)}`),
          el("span", {}, `score ${percent(item.score)}`),
          el(
            "span",
            { class: item.label === data.predicted_class ? null : "differs" },
            `label ${className(item.label)}`,
          ),
        ),
      );
    }),
  );
  $("prev").disabled = similar.offset === 0;
  $("next").disabled = similar.offset + similar.limit >= similar.total;
  $("explanation").dataset.key = data.key;
  $("explanation").hidden = false;
}

async function load(key, offset = 0) {
  try {
    showError(null);
    const query = `offset=${offset}&limit=${state.info.page_size}`;
    const data = await api(`/api/explain/${encodeURIComponent(key)}?${query}`);
    const fresh = data.key !== state.key;
    render(data);
    if (fresh) $("explanation").scrollIntoView({ block: "start" });
  } catch (error) {
    showError(error.message);
  }
}

function route() {
  const key = decodeURIComponent(location.hash.slice(1));
  if (key && key !== state.key) load(key);
}

async function upload(file) {
  try {
    showError(null);
    const data = await api("/api/upload", {
      method: "POST",
      body: file,
      headers: { "Content-Type": file.type || "application/octet-stream" },
    });
    render(data);
    history.pushState(null, "", `#${data.key}`);
    $("explanation").scrollIntoView({ block: "start" });
  } catch (error) {
    showError(`upload failed: ${error.message}`);
  }
}

// --------------------------------------------------------------------------- regions
function regionCard(region) {
  const name = `region ${region.regions.join(", ")}`;
  const caption = `${name}: reference image ${region.reference}, class ${region.class_name}`;
  return el(
    "article",
    { class: "region", "data-key": region.key },
    el("h3", {}, el("a", { href: `#${region.key}`, title: "explain" }, `class ${region.class_name}`)),
    picture(region, caption),
    el("p", {}, `covers ${region.representativeness} · delta ${region.delta}`),
    el(
      "div",
      { class: "covered" },
      ...region.covered.map((item) =>
        picture(item, `reference image ${item.reference}, covered by ${name}`),
      ),
    ),
  );
}

async function loadRegions() {
  try {
    const data = await api("/api/regions");
    if (data.status === "computing") {
      $("regions-status").textContent = `${data.message}…`;
      setTimeout(loadRegions, 1000);
      return;
    }
    $("regions-status").textContent =
      data.message ||
      `${data.regions.length} regions (k-means inputs), the most representative first. ` +
        "Each covers the reference images on its side of every boundary of its P(x).";
    $("gallery").replaceChildren(...data.regions.map(regionCard));
  } catch (error) {
    $("regions-status").textContent = error.message;
  }
}

// --------------------------------------------------------------------------- start
async function start() {
  try {
    state.info = await api("/api/info");
  } catch (error) {
    $("info").textContent = `cannot reach the viewer: ${error.message}`;
    return;
  }
  const info = state.info;
  $("info").textContent =
    `${info.dataset} · ${info.arch} at layer ${info.target_layer} · ` +
    `${info.n_reference} reference images · |Q| = ${info.n_boundaries} boundaries`;
  $("ref-id").max = info.n_reference - 1;

  for (const radio of document.querySelectorAll("input[name=view]")) {
    radio.addEventListener("change", () => setView(radio.value));
  }
  document.addEventListener("keydown", (event) => {
    if (event.key === "h" && !event.target.matches("input[type=number], textarea")) {
      setView(state.view === "heat" ? "image" : "heat");
    }
  });
  document.addEventListener("click", (event) => {
    const img = event.target.closest("img.zoomable");
    if (img) zoom(img);
  });
  $("by-id").addEventListener("submit", (event) => {
    event.preventDefault();
    location.hash = `r${Number($("ref-id").value)}`;
  });
  $("random").addEventListener("click", () => {
    location.hash = `r${Math.floor(Math.random() * info.n_reference)}`;
  });
  $("upload").addEventListener("change", async (event) => {
    const file = event.target.files[0];
    if (file) await upload(file);
    event.target.value = "";
  });
  $("prev").addEventListener("click", () => load(state.key, Math.max(0, state.offset - state.limit)));
  $("next").addEventListener("click", () => load(state.key, state.offset + state.limit));
  const dialog = $("zoom");
  dialog.addEventListener("close", () => {
    state.zoomed = null;
  });
  dialog.addEventListener("click", (event) => {
    if (event.target === dialog || event.target === $("zoom-image")) dialog.close();
  });
  $("zoom-close").addEventListener("click", () => dialog.close());
  $("zoom-toggle").addEventListener("click", () =>
    setView(state.view === "heat" ? "image" : "heat"),
  );
  $("zoom-explain").addEventListener("click", () => {
    location.hash = state.zoomed.dataset.key;
    dialog.close();
  });
  window.addEventListener("hashchange", route);

  loadRegions();
  route();
}

start();
