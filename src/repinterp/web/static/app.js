// The repinterp viewer: plain JavaScript over the JSON API of docs/web.md.
"use strict";

const state = {
  info: null,
  view: "overlay", // image | overlay | side
  lastHeatView: "overlay",
  cmap: "inferno",
  key: null,
  data: null,
  offset: 0,
  limit: 12,
  total: 0,
  zoomed: null,
  regions: null,
  compared: new Map(), // "key method" -> comparison
};
const $ = (id) => document.getElementById(id);

// What each number on the page is: its name and a sentence (shown as a tooltip and in the legend).
const GLOSSARY = {
  score: ["score", "the model's probability (softmax) of the input's predicted class on this image"],
  masked: [
    "masked",
    "the same probability when only the heat map's 20 % hottest pixels are kept and the other " +
      "80 % blacked out: high when the heat map finds what the model uses",
  ],
  dist: null, // RI's distance to the input, named by its metric once /api/info is read (start)
  rank: ["rank", "place in RI's ranking of the similar images by Dist (#1 = most similar)"],
  label: ["label", "the reference image's true class (in red when it is not the input's predicted class)"],
  rep: [
    "representativeness |R|",
    "reference images covered by P(x): on the input's side of every one of its boundaries",
  ],
  p: ["|P(x)|", "boundaries in the interpretation P(x), out of the |Q| sampled"],
  tau: [
    "τ(x)",
    "delta: reference images of another class that no choice of boundaries separates from " +
      "the input; P(x) may cover that many",
  ],
  interprets: [
    "interprets",
    "reference images this card's regions interpret: those it covers with the largest |R| " +
      "among the regions, else those nearest its k-means centre; over all cards these add up to |R|",
  ],
  regions: ["regions", "k-means regions whose input has this very polytope (same boundaries, same sides)"],
  audit_rank: ["audit rank", "1 for the strategy of its class to look at first (by score)"],
  audit_score: ["audit score", "how far it stands out of the model's strategies: the most by which its portable_cue, fine_detail, shared_pattern, moved_pattern or nearest_pattern (or half its tint) exceeds that reason's median over the model (the median of its classes' medians), or its wide_portable_cue (or half its blur_sensitive) that of its class's other strategies (a strategy alone in its class: not read); flagged from 0.4, or from 0.2 when another strategy of its class scores 0.4 or more"],
  members: ["members", "reference images of this strategy: the model treats them alike (found without labels)"],
  inside: ["inside", "the strategy's members that its polytope covers"],
  sublabels: [
    "sub-labels",
    "what the reference images this card interprets are made of, by sub-label (a sub-concept known for " +
      "evaluation only, e.g. mnist-super's digit): name: count, most first, and a bar of their shares",
  ],
};
const tip = (name) => GLOSSARY[name][1];

// An element with attributes (null ones left out) and children (strings become text, never HTML).
function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value !== null && value !== undefined) node.setAttribute(name, value);
  }
  node.append(...children);
  return node;
}

// A number with its name; the tooltip says what it is.
function num(name, value, { label = GLOSSARY[name][0], className = null } = {}) {
  return el(
    "span",
    { class: className ? `num ${className}` : "num", title: `${label}: ${tip(name)}`, "data-num": name },
    el("span", { class: "name" }, label),
    " ",
    el("b", {}, String(value)),
  );
}

class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

async function api(url, options = {}) {
  const response = await fetch(url, options);
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new ApiError(body.error || `${response.status} ${response.statusText}`, response.status);
  return body;
}

// Errors appear next to the control that caused them, and the next action clears them all.
function clearErrors() {
  for (const node of document.querySelectorAll(".error")) {
    node.textContent = "";
    node.hidden = true;
  }
}

function showError(id, message) {
  $(id).textContent = message;
  $(id).hidden = false;
}

const percent = (x) => `${(100 * x).toFixed(2)}\u00a0%`; // no line break before %
const className = (c) => state.info.class_names[c] ?? String(c);

// --------------------------------------------------------------------------- pictures
// A picture: the image, with its heat map over it or beside it (body's view class), a
// placeholder of the final size until both have loaded; Enter or a click zooms it.
function heatSource(url) {
  return `${url}&cmap=${state.cmap}`;
}

// numbers: a function giving the picture's labelled numbers, shown again when it is zoomed.
function picture(item, caption, { zoomable = true, numbers = () => [] } = {}) {
  const box = el("div", {
    class: "pic loading",
    "data-key": item.key,
    "data-caption": caption,
    title: zoomable ? `${caption} (click or Enter to zoom)` : caption,
  });
  if (zoomable) {
    box.classList.add("zoomable");
    box.tabIndex = 0;
    box.setAttribute("role", "button");
    box.setAttribute("aria-label", `${caption}: zoom`);
  }
  box.item = item;
  box.numbers = numbers;
  const [height, width] = state.info.input_shape.slice(1);
  const images = [el("img", { class: "base", alt: caption, width, height, src: item.image })];
  if (item.heatmap) {
    const heat = el("img", { class: "heat", alt: `heat map of ${caption}`, width, height });
    heat.dataset.source = item.heatmap;
    heat.src = heatSource(item.heatmap);
    images.push(heat);
  } else {
    box.classList.add("no-heat");
    images.push(el("span", { class: "heat-missing" }, "no heat map"));
  }
  let pending = images.filter((node) => node.tagName === "IMG").length;
  for (const img of images.filter((node) => node.tagName === "IMG")) {
    img.addEventListener("load", () => {
      pending -= 1;
      if (pending === 0) box.classList.remove("loading");
    });
    img.addEventListener("error", () => {
      box.classList.remove("loading");
      box.classList.add("failed");
    });
  }
  box.append(...images);
  return box;
}

function setView(view) {
  state.view = view;
  if (view !== "image") state.lastHeatView = view;
  document.body.classList.remove("view-image", "view-overlay", "view-side");
  document.body.classList.add(`view-${view}`);
  for (const radio of document.querySelectorAll("input[name=view]")) radio.checked = radio.value === view;
}

function setColormap(cmap) {
  state.cmap = cmap;
  $("colorbar").querySelector(".bar").style.background = state.info.colormaps[cmap];
  for (const img of document.querySelectorAll("img.heat")) img.src = heatSource(img.dataset.source);
}

function setOpacity(value) {
  document.documentElement.style.setProperty("--opacity", String(value / 100));
  $("opacity-value").textContent = `${value} %`;
}

// --------------------------------------------------------------------------- zoom
function zoomGroup(box) {
  const group = box.closest("[data-group]");
  return group ? [...group.querySelectorAll(".pic.zoomable")] : [box];
}

function zoom(box) {
  state.zoomed = box;
  const group = zoomGroup(box);
  const at = group.indexOf(box);
  $("zoom-picture").replaceChildren(picture(box.item, box.dataset.caption, { zoomable: false }));
  $("zoom-numbers").replaceChildren(...box.numbers());
  const position = group.length > 1 ? ` (${at + 1} of ${group.length})` : "";
  $("zoom-caption").textContent = `${box.dataset.caption}${position}`;
  $("zoom-caption").title = "the zoomed image, and its place among the images of its group";
  $("zoom-prev").disabled = at <= 0;
  $("zoom-next").disabled = at >= group.length - 1;
  $("zoom-toggle").hidden = !box.item.heatmap;
  $("zoom-explain").hidden = !box.dataset.key || box.dataset.key === state.key;
  if (!$("zoom").open) $("zoom").showModal();
}

function stepZoom(step) {
  const group = zoomGroup(state.zoomed);
  const next = group[group.indexOf(state.zoomed) + step];
  if (next) zoom(next);
}

function toggleView() {
  setView(state.view === "image" ? state.lastHeatView : "image");
}

// --------------------------------------------------------------------------- explanation
function fact(name, label, value, title) {
  return [el("dt", { title }, label), el("dd", { "data-fact": name, title }, value)];
}

// How a reference image is named: its file (an image folder's), else "ref N".
function refName(item) {
  return item.name === `reference:${item.reference}` ? `ref ${item.reference}` : item.name;
}

// A reference image's number, and its file when it has one.
function refFull(item) {
  return item.name === `reference:${item.reference}` ? `${item.reference}` : `${item.reference}, ${item.name}`;
}

// A picture in a card: its caption line (a link or a name), then its labelled numbers.
function card(kind, item, caption, head, numbers) {
  return el("figure", { class: kind }, picture(item, caption, { numbers }), el("figcaption", {}, head, ...numbers()));
}

function similarCard(item, data) {
  const caption = `#${item.rank}: reference image ${refFull(item)}`;
  const differs = item.label !== data.predicted_class;
  const numbers = () => [
    num("dist", item.distance.toFixed(2), { label: "Dist" }),
    num("score", percent(item.score)),
    num("label", className(item.label), { className: differs ? "differs" : null }),
  ];
  const link = el(
    "a",
    { href: `#${item.key}`, title: `rank ${item.rank} by Dist; reference image ${refFull(item)}: explain it` },
    `#${item.rank} ${refName(item)}`,
  );
  return card("card", item, caption, link, numbers);
}

const CONTRAST_TIP =
  "beyond the paper: the input's heat map becomes the contrastive map of why the model says its class " +
  "rather than the class chosen (the boundary between the two classes at the input, Eq. 2's weights)";

// The input's picture: P(x)'s heat map, or the contrastive map against class `contrast` ("": none).
function showInput(data, title, contrast) {
  const numbers = () => [num("score", percent(data.score)), num("rep", data.representativeness), num("tau", data.delta)];
  const item = contrast === "" ? data : { ...data, heatmap: `${data.heatmap}&contrast=${contrast}` };
  const caption =
    contrast === "" ? title : `${title}: why ${className(data.predicted_class)} rather than ${className(Number(contrast))}`;
  $("input-pictures").replaceChildren(picture(item, caption, { numbers }));
}

function contrastSelect(data, title) {
  const others = state.info.class_names.map((name, c) => [name, c]).filter(([, c]) => c !== data.predicted_class);
  const select = el(
    "select",
    { id: "contrast", title: CONTRAST_TIP },
    el("option", { value: "" }, "— (P(x)'s map)"),
    ...others.map(([name, c]) => el("option", { value: String(c) }, name)),
  );
  select.addEventListener("change", () => showInput(data, title, select.value));
  return select;
}

function render(data) {
  const similar = data.similar;
  Object.assign(state, { key: data.key, data, offset: similar.offset, limit: similar.limit, total: similar.total });
  const title = data.source === "reference" ? `Reference image ${refFull(data)}` : "Uploaded image";
  $("title").textContent = title;
  $("title").title = data.source === "reference" ? "reference images are numbered from 0" : "an image you uploaded";
  showInput(data, title, "");
  const info = state.info;
  const facts = [
    fact("class", "Predicted class", className(data.predicted_class), "the class the model predicts for this image"),
    fact("score", "Score", percent(data.score), `score: ${tip("score")}`),
    data.label === null ? [] : fact("label", "True label", className(data.label), "the image's label in the data set"),
    fact(
      "representativeness",
      "Representativeness |R|",
      `${data.representativeness} of ${data.n_reference} reference images`,
      `representativeness |R|: ${tip("rep")}`,
    ),
    fact("boundaries", "Boundaries |P(x)|", `${data.boundaries.length} of ${info.n_boundaries}`, `|P(x)|: ${tip("p")}`),
    fact("delta", "τ(x) (delta)", String(data.delta), `τ(x): ${tip("tau")}`),
    data.strategy === null || data.strategy === undefined
      ? []
      : fact(
          "strategy",
          "Strategy",
          `${data.strategy}${data.strategy_flagged ? " (flagged by the audit)" : ""}`,
          "the group of reference images of its class that the model treats as it treats this image (found without labels); flagged: the audit marks it as one to check",
        ),
    data.heatmap === null ? [] : fact("contrast", "Rather than", contrastSelect(data, title), CONTRAST_TIP),
  ];
  $("facts").replaceChildren(...facts.flat());
  $("message").textContent = data.message || "";
  $("message").title = "the engine's note on this interpretation";
  $("message").hidden = !data.message;

  const first = similar.items.length ? similar.offset + 1 : 0;
  $("range").textContent = `(${first}–${similar.offset + similar.items.length} of ${similar.total})`;
  $("similar-hint").textContent =
    `Covered by the same interpretation P(x), most similar first by Dist (${data.metric}); heat ` +
    "maps reuse the input's channel weights." +
    (similar.input_left_out ? " The input itself (Dist 0) is left out." : "");
  $("similar").replaceChildren(...similar.items.map((item) => similarCard(item, data)));
  $("prev").disabled = similar.offset === 0;
  $("next").disabled = similar.offset + similar.limit >= similar.total;
  $("explanation").dataset.key = data.key;
  $("not-found").hidden = true;
  $("explanation").hidden = false;
  document.title = `${title} · repinterp viewer`;
}

function resetCompare() {
  $("compare").hidden = true;
  $("compare-button").setAttribute("aria-expanded", "false");
  $("compare-rows").replaceChildren();
}

function notFound(key, message) {
  Object.assign(state, { key: null, data: null });
  $("explanation").hidden = true;
  $("explanation").dataset.key = "";
  resetCompare();
  $("not-found-message").textContent = `Nothing at #${key}: ${message}.`;
  $("not-found").hidden = false;
  document.title = "Not found · repinterp viewer";
}

async function load(key, offset = 0) {
  const fresh = key !== state.key;
  const query = `offset=${offset}&limit=${state.info.page_size}`;
  try {
    const data = await api(`/api/explain/${encodeURIComponent(key)}?${query}`);
    if (fresh) resetCompare();
    render(data);
    if (fresh) $("explanation").scrollIntoView({ block: "start" });
  } catch (error) {
    if (fresh) notFound(key, error.message);
    else showError("page-error", error.message);
  }
}

function route() {
  clearErrors();
  const key = decodeURIComponent(location.hash.slice(1));
  if (key && key !== state.key) load(key);
}

async function upload(file) {
  clearErrors();
  try {
    const data = await api("/api/upload", {
      method: "POST",
      body: file,
      headers: { "Content-Type": file.type || "application/octet-stream", "X-Repinterp": "1" },
    });
    resetCompare();
    render(data);
    history.pushState(null, "", `#${data.key}`);
    $("explanation").scrollIntoView({ block: "start" });
  } catch (error) {
    showError("upload-error", `upload failed: ${error.message}`);
  }
}

async function exportAs(kind) {
  clearErrors();
  const button = $(`export-${kind}`);
  button.disabled = true;
  try {
    // the figure is drawn as the page shows it: the overlay's opacity and the colours
    const drawn = new URLSearchParams({ opacity: $("opacity").value, cmap: state.cmap });
    const response = await fetch(`/api/export/${encodeURIComponent(state.key)}.${kind}?${drawn}`);
    if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      throw new Error(body.error || `${response.status} ${response.statusText}`);
    }
    const link = el("a", { href: URL.createObjectURL(await response.blob()), download: `repinterp-${state.key}.${kind}` });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 60_000);
  } catch (error) {
    showError("action-error", `export failed: ${error.message}`);
  } finally {
    button.disabled = false;
  }
}

// --------------------------------------------------------------------------- compare
function compareRow(method) {
  const name = state.info.methods[method];
  return el(
    "div",
    { class: "compare-row loading", "data-method": method, "data-group": `compare-${method}` },
    el("h4", {}, name, el("span", { class: "status" }, el("span", { class: "spinner", "aria-hidden": "true" }), ` computing ${name}…`)),
    el("div", { class: "compare-cells" }),
  );
}

function fillRow(row, result) {
  row.classList.remove("loading");
  const status = row.querySelector(".status");
  if (result.message) {
    status.replaceChildren(`: ${result.message}`);
  } else {
    status.replaceChildren(" · ", num("masked", percent(result.mean_masked_score), { label: "mean masked" }));
  }
  const cells = result.items.map((item) => {
    const caption =
      item.rank === 0 ? `${result.name}: the input` : `${result.name}: #${item.rank} reference image ${refFull(item)}`;
    const numbers = () => [
      num("score", percent(item.score)),
      ...(item.masked_score === null ? [] : [num("masked", percent(item.masked_score))]),
    ];
    const name = el("span", { title: caption }, item.rank === 0 ? "input" : `#${item.rank} ${refName(item)}`);
    return card("cell", item, caption, name, numbers);
  });
  row.querySelector(".compare-cells").replaceChildren(...cells);
}

async function compare() {
  clearErrors();
  if (!$("compare").hidden) {
    resetCompare();
    return;
  }
  const key = state.key;
  $("compare").hidden = false;
  $("compare-button").setAttribute("aria-expanded", "true");
  const methods = Object.keys(state.info.methods); // RI first, Score-CAM (the slow one) last
  const rows = methods.map(compareRow);
  $("compare-rows").replaceChildren(...rows);
  for (const [i, method] of methods.entries()) {
    const id = `${key} ${method}`;
    try {
      if (!state.compared.has(id)) {
        state.compared.set(id, await api(`/api/compare/${encodeURIComponent(key)}?method=${method}&k=${state.info.compare_k}`));
      }
      if (state.key !== key || !rows[i].isConnected) return;
      fillRow(rows[i], state.compared.get(id));
    } catch (error) {
      if (state.key !== key || !rows[i].isConnected) return;
      rows[i].classList.remove("loading");
      rows[i].querySelector(".status").replaceChildren();
      showError("action-error", `compare failed (${state.info.methods[method]}): ${error.message}`);
    }
  }
}

// --------------------------------------------------------------------------- regions
function regionCard(region) {
  const names = region.regions.map((v) => `#${v}`).join(", ");
  const caption = `class ${region.class_name}: reference image ${refFull(region)}, the input of region ${names}`;
  const inputs = region.inputs.map((ref, n) => refName({ reference: ref, name: region.input_names[n] })).join(", ");
  const numbers = () => [
    num("rep", region.representativeness, { label: "covers" }),
    num("interprets", region.interpreted),
    num("p", region.boundaries.length, { label: "|P|" }),
    num("tau", region.delta, { label: "τ" }),
  ];
  const stats = numbers();
  stats[2].title += `; this polytope's: ${region.boundaries.join(", ")}`;
  const regionsNum = el(
    "span",
    { class: "num", title: `k-means regions ${names} (inputs: ${inputs}): ${tip("regions")}`, "data-num": "regions" },
    el("span", { class: "name" }, region.regions.length === 1 ? "region" : `${region.regions.length} regions`),
    " ",
    el("b", {}, names),
  );
  const covered = region.covered.map((item) =>
    picture(item, `reference image ${refFull(item)}, #${item.rank} in the polytope of class ${region.class_name}`, {
      numbers: () => [num("dist", item.distance.toFixed(2), { label: "Dist" }), num("score", percent(item.score))],
    }),
  );
  return el(
    "article",
    { class: "region", "data-key": region.key, "data-group": `region-${region.key}` },
    el(
      "h3",
      {},
      el(
        "a",
        { href: `#${region.key}`, title: `predicted class ${region.class_name}: explain reference image ${region.reference}` },
        `class ${region.class_name}`,
      ),
    ),
    picture(region, caption, { numbers }),
    el("p", { class: "stats" }, ...stats, regionsNum),
    el("div", { class: "covered" }, ...covered),
    ...(region.sub_labels ? [composition(region.sub_labels)] : []),
  );
}

// A card's sub-label composition: "sub-labels 4: 31, 9: 2" and a bar cut in proportion.
function composition(counts) {
  const text = counts.map((c) => `${c.name}: ${c.count}`).join(", ");
  const total = counts.reduce((n, c) => n + c.count, 0);
  const parts = counts.map((c) => {
    const part = el("span", { title: `${c.name}: ${c.count}` });
    part.style.width = `${(100 * c.count) / total}%`; // through the CSSOM: the page's CSP refuses style attributes
    part.style.background = c.colour;
    return part;
  });
  return el(
    "div",
    { class: "sub-labels", "data-num": "sub-labels", title: `sub-labels: ${tip("sublabels")}` },
    el("span", { class: "name" }, "sub-labels"),
    " ",
    el("b", {}, text),
    el("div", { class: "composition", role: "img", "aria-label": `sub-labels ${text}` }, ...parts),
  );
}

// A strategy (granularity strategy): its input under its polytope's map, its audit, members.
function strategyCard(s) {
  const caption = `class ${s.class_name}: strategy ${s.strategy}, its member nearest its centre, reference image ${refFull(s)}`;
  const numbers = () => [
    num("audit_rank", s.rank),
    num("audit_score", s.score.toFixed(3)),
    num("members", s.size),
    num("inside", percent(s.inside)),
  ];
  const reasons = Object.entries(s.reasons).map(([name, value]) =>
    el("span", { class: "num", title: STRATEGY_TIPS[name] || name }, el("span", { class: "name" }, name), " ", el("b", {}, value.toFixed(2))),
  );
  const members = s.members.map((item) =>
    picture(item, `reference image ${refFull(item)}, a member of strategy ${s.strategy}`, { numbers: () => [] }),
  );
  const title = `class ${s.class_name}: strategy ${s.strategy}` + (s.flagged ? " (flagged)" : s.main ? " (main)" : "");
  return el(
    "article",
    { class: s.flagged ? "region strategy flagged" : "region strategy", "data-key": s.key },
    el("h3", {}, el("a", { href: `#${s.key}`, title: "explain the strategy's input" }, title)),
    picture(s, caption, { numbers }),
    el("p", { class: "stats" }, ...numbers(), ...reasons),
    el("div", { class: "covered" }, ...members),
    ...(s.sub_labels ? [composition(s.sub_labels)] : []),
  );
}

const STRATEGY_TIPS = {
  portable_cue: "the share of pastes of its members' 5% most relevant pixels onto images of other classes that the model then predicts its class, minus the same for pixels from a random place",
  necessary_cue: "the share of its members that leave its class once those pixels are filled with the image's mean, minus the same for a random place",
  fine_detail: "the share of images of other classes predicted its class once a member's fine detail is added",
  blur_sensitive: "the share of its members that leave its class once blurred",
  tint: "the share of images of other classes predicted its class once given a member's mean colour",
  wide_portable_cue: "portable_cue with twice the area pasted (a cue larger than the narrow paste)",
  shared_pattern: "the share of images of other classes predicted its class once given what all its members share at the same place (their mean image minus all images' mean, where they agree)",
  moved_pattern: "the same with its members' mean difference moved to a random place: a pattern that carries the class anywhere, such as a texture",
  look_alike_pattern: "the share of images of its members' runner-up class predicted its class once given their mean difference moved to a random place, minus the same with only its mean colour (not scored)",
  nearest_pattern: "the share of images of the class its members look most like (whose mean image is nearest theirs) predicted its class once given their mean difference moved to a random place, minus the same with only its mean colour: a pattern, such as a texture, that turns look-alikes into its class, and not by its colour alone",
};

function renderStrategies(list) {
  if (!list || list.length === 0) return;
  const flagged = list.filter((s) => s.flagged).length;
  $("strategies").hidden = false;
  $("strategies-status").textContent =
    `${list.length} strategies found without labels, each class's in the audit's order (rank 1: look at it first; ` +
    `the audit reads the model's predictions on pasted and removed pixels, never a label); ${flagged} flagged (score 0.4 or more, or 0.2 or more when another strategy of its class scores 0.4 or more).`;
  $("strategy-gallery").replaceChildren(...list.map(strategyCard));
}

function renderRegions() {
  const data = state.regions;
  const chosen = $("class-filter").value;
  const order = {
    representativeness: (a, b) => b.representativeness - a.representativeness,
    class: (a, b) => a.predicted_class - b.predicted_class || b.representativeness - a.representativeness,
    regions: (a, b) => b.regions.length - a.regions.length || b.representativeness - a.representativeness,
  }[$("sort").value];
  const shown = data.regions.filter((r) => chosen === "" || String(r.predicted_class) === chosen).sort(order);
  const regionCount = shown.reduce((n, r) => n + r.regions.length, 0);
  const interpreted = shown.reduce((n, r) => n + r.interpreted, 0);
  const scope = chosen === "" ? "" : ` of class ${className(Number(chosen))}`;
  $("regions-status").textContent =
    `${shown.length} distinct polytopes${scope} (cards) stand for ${regionCount} of the ${data.n_regions} k-means ` +
    `regions and interpret ${interpreted} of the ${data.n_reference} reference images.` +
    (chosen === "" && data.finds ? ` ${data.finds}.` : "");
  $("regions-status").title = "k-means regions with the same polytope are one card; each reference image is interpreted by one region";
  $("gallery").replaceChildren(...shown.map(regionCard));
}

async function loadRegions() {
  try {
    const data = await api("/api/regions");
    if (data.status === "computing") {
      $("regions-status").textContent = `${data.message}…`;
      setTimeout(loadRegions, 1000);
      return;
    }
    if (data.status !== "ready") {
      $("regions-status").textContent = data.message;
      return;
    }
    state.regions = data;
    renderStrategies(data.strategies);
    const counts = new Map();
    for (const r of data.regions) counts.set(r.predicted_class, (counts.get(r.predicted_class) || 0) + 1);
    const options = [...counts.keys()].sort((a, b) => a - b).map((c) => el("option", { value: String(c) }, `${className(c)} (${counts.get(c)})`));
    $("class-filter").replaceChildren(el("option", { value: "" }, `all (${data.regions.length})`), ...options);
    renderRegions();
  } catch (error) {
    $("regions-status").textContent = error.message;
  }
}

// --------------------------------------------------------------------------- start
function onKey(event) {
  if ($("zoom").open) {
    if (event.key === "ArrowLeft" || event.key === "ArrowRight") {
      event.preventDefault();
      stepZoom(event.key === "ArrowLeft" ? -1 : 1);
    } else if (event.key === "h") {
      toggleView();
    }
    return;
  }
  if (event.altKey || event.ctrlKey || event.metaKey || event.target.matches("input[type=number], textarea")) return;
  const control = event.target.matches("input, select"); // radios, sliders and lists use arrows
  if ((event.key === "Enter" || event.key === " ") && event.target.matches(".pic.zoomable")) {
    event.preventDefault();
    zoom(event.target);
  } else if (event.key === "h") {
    toggleView();
  } else if ((event.key === "ArrowLeft" || event.key === "ArrowRight") && state.key && !control) {
    const button = $(event.key === "ArrowLeft" ? "prev" : "next");
    if (!button.disabled) button.click();
  }
}

function wire() {
  const info = state.info;
  // The sticky heat-map bar's height: a section scrolled to (a bookmarked #rN) lands below it.
  const bar = $("heat-controls");
  new ResizeObserver(() => document.documentElement.style.setProperty("--bar-height", `${bar.offsetHeight}px`)).observe(bar);
  for (const radio of document.querySelectorAll("input[name=view]")) {
    radio.addEventListener("change", () => setView(radio.value));
  }
  $("cmap").replaceChildren(...Object.keys(info.colormaps).map((name) => el("option", { value: name }, name)));
  $("cmap").value = info.default_colormap;
  $("cmap").addEventListener("change", () => setColormap($("cmap").value));
  $("opacity").addEventListener("input", () => setOpacity(Number($("opacity").value)));
  document.addEventListener("keydown", onKey);
  document.addEventListener("click", (event) => {
    const box = event.target.closest(".pic.zoomable");
    if (box) zoom(box);
  });
  $("by-id").addEventListener("submit", (event) => {
    event.preventDefault();
    clearErrors();
    location.hash = `r${Number($("ref-id").value)}`;
  });
  $("ref-id").addEventListener("invalid", () => {
    clearErrors();
    showError("id-error", `choose a reference image from 0 to ${info.n_reference - 1}`);
  });
  $("random").addEventListener("click", () => {
    clearErrors();
    location.hash = `r${Math.floor(Math.random() * info.n_reference)}`;
  });
  $("upload").addEventListener("change", async (event) => {
    const file = event.target.files[0];
    if (file) await upload(file);
    event.target.value = "";
  });
  $("prev").addEventListener("click", () => {
    clearErrors();
    load(state.key, Math.max(0, state.offset - state.limit));
  });
  $("next").addEventListener("click", () => {
    clearErrors();
    load(state.key, state.offset + state.limit);
  });
  $("compare-button").addEventListener("click", compare);
  $("export-png").addEventListener("click", () => exportAs("png"));
  $("export-json").addEventListener("click", () => exportAs("json"));
  $("class-filter").addEventListener("change", () => {
    clearErrors();
    renderRegions();
  });
  $("sort").addEventListener("change", () => {
    clearErrors();
    renderRegions();
  });
  const dialog = $("zoom");
  dialog.addEventListener("close", () => {
    if (state.zoomed?.isConnected) state.zoomed.focus();
    state.zoomed = null;
  });
  dialog.addEventListener("click", (event) => {
    if (event.target === dialog) dialog.close();
  });
  $("zoom-close").addEventListener("click", () => dialog.close());
  $("zoom-prev").addEventListener("click", () => stepZoom(-1));
  $("zoom-next").addEventListener("click", () => stepZoom(1));
  $("zoom-toggle").addEventListener("click", toggleView);
  $("zoom-explain").addEventListener("click", () => {
    clearErrors();
    const key = state.zoomed.dataset.key;
    state.zoomed = null;
    dialog.close();
    location.hash = key;
  });
  window.addEventListener("hashchange", route);
}

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
    `${info.n_reference} reference images · |Q| = ${info.n_boundaries} boundaries · ${info.granularity_text}`;
  $("ref-id").max = info.n_reference - 1;
  const [height, width] = info.input_shape.slice(1);
  document.documentElement.style.setProperty("--aspect", `${width} / ${height}`);
  GLOSSARY.dist = [
    `Dist (${info.metric})`,
    `RI's ${info.metric} distance to the input (0 = the same): ${info.metric_meaning}`,
  ];
  const strategyOnly = ["audit_rank", "audit_score", "members", "inside"];
  const named = Object.entries(GLOSSARY).filter(
    ([key]) => (key !== "sublabels" || info.sub_labels) && (!strategyOnly.includes(key) || info.granularity === "strategy"),
  );
  $("glossary").replaceChildren(
    ...named.flatMap(([, [name, text]]) => [el("dt", {}, name), el("dd", {}, text)]),
  );
  wire();
  setColormap(info.default_colormap);
  $("opacity").value = String(info.default_opacity);
  setOpacity(info.default_opacity);
  setView("overlay");
  loadRegions();
  route();
}

start();
