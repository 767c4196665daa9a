/* palace ui: draws the graph pages (docs/ui.md) with the vendored cytoscape.js.
 *
 * A container <div class="graph" data-src="..."> names the JSON of its graph (served by
 * pages_graph.py: {nodes: [{id, label, kind, href?}], edges: [{id, source, target, label,
 * ended?}], truncated, ...}). Labels are drawn as canvas text, never parsed as HTML. When
 * drawn, the container carries data-nodes and data-edges (the counts; tests wait on them).
 * A tap on an entity (or a fact: its subject) loads its facts and history into #detail
 * (htmx); on a concept, it jumps to the concept's row.
 */
(function () {
  "use strict";

  var STYLE = [
    { selector: "node", style: {
      "label": "data(label)", "font-size": 11, "color": "#1d232a",
      "text-valign": "bottom", "text-margin-y": 3, "text-wrap": "ellipsis",
      "text-max-width": "140px", "background-color": "#3a6f9a", "width": 18, "height": 18,
      "min-zoomed-font-size": 7 } },
    { selector: "node[kind = 'value']", style: {
      "shape": "round-rectangle", "background-color": "#d9c27a", "width": 12, "height": 12,
      "color": "#5b4a12" } },
    { selector: "node[kind = 'concept']", style: { "background-color": "#5a8a4a" } },
    { selector: "node:selected", style: { "border-width": 3, "border-color": "#c0392b" } },
    { selector: "edge", style: {
      "label": "data(label)", "font-size": 9, "color": "#445", "width": 1.5,
      "line-color": "#9aa7b3", "target-arrow-color": "#9aa7b3",
      "target-arrow-shape": "triangle", "curve-style": "bezier",
      "text-rotation": "autorotate", "text-background-color": "#ffffff",
      "text-background-opacity": 0.8, "text-background-padding": "1px",
      // labels too small to read are not drawn: a big graph zoomed out draws fast
      "min-zoomed-font-size": 7 } },
    { selector: "edge[?ended]", style: { "line-style": "dashed" } }
  ];

  function say(box, text) {
    var status = document.getElementById("graph-status");
    if (status) { status.textContent = text; }
    box.setAttribute("data-state", text ? "said" : "");
  }

  function summary(data) {
    var n = data.nodes.length, e = data.edges.length;
    var text = n + " nodes and " + e + " edges drawn";
    if (data.truncated) {
      text += "; the graph is cut at the first " + data.max_nodes + " nodes";
    }
    return text + ". Drag to move, scroll to zoom, click a node or an arrow for its details.";
  }

  function layoutFor(count) {
    // cose (force-directed) reads best but grows quadratically: past a few hundred nodes
    // concentric rings by degree keep the page responsive.
    if (count <= 200) {
      // (nodes start at one point: cose must spread them itself, hence randomize)
      return { name: "cose", animate: false, randomize: true, nodeRepulsion: 20000,
               idealEdgeLength: 80, nodeOverlap: 20, componentSpacing: 60, padding: 30 };
    }
    return { name: "concentric", animate: false, padding: 20,
             concentric: function (node) { return node.degree(); } };
  }

  function tapped(element) {
    var href = element.data("href");
    if (!href) { return; }
    if (href.charAt(0) === "#") {
      window.location.hash = href;
    } else if (window.htmx) {
      window.htmx.ajax("GET", href, { target: "#detail", swap: "innerHTML" });
    } else {
      window.location.href = href;
    }
  }

  function draw(box, data) {
    var elements = [];
    data.nodes.forEach(function (n) { elements.push({ group: "nodes", data: n }); });
    data.edges.forEach(function (e) { elements.push({ group: "edges", data: e }); });
    var big = data.nodes.length > 200;  // pan and zoom a bitmap, not every edge redrawn
    var cy = window.cytoscape({ container: box, elements: elements, style: STYLE,
                                layout: { name: "preset" }, minZoom: 0.1, maxZoom: 4,
                                hideEdgesOnViewport: big, textureOnViewport: big });
    box.palaceGraph = cy;  // for a test or the console: the drawn graph
    cy.on("tap", "node, edge", function (evt) { tapped(evt.target); });
    var layout = cy.layout(layoutFor(data.nodes.length));
    layout.one("layoutstop", function () {
      cy.fit(undefined, 30);
      if (cy.zoom() > 1.2) {  // a small graph: readable labels rather than huge ones
        cy.zoom(1.2);
        cy.center();
      }
      box.setAttribute("data-nodes", String(data.nodes.length));
      box.setAttribute("data-edges", String(data.edges.length));
      say(box, data.nodes.length ? summary(data) : "Nothing to draw: no fact was valid then.");
    });
    layout.run();
  }

  function load(box) {
    if (!window.cytoscape) { say(box, "The graph library did not load."); return; }
    say(box, "Loading the graph…");
    fetch(box.getAttribute("data-src"), { credentials: "same-origin",
                                          headers: { "Accept": "application/json" } })
      .then(function (response) {
        if (!response.ok) { throw new Error("the server answered " + response.status); }
        return response.json();
      })
      .then(function (data) { draw(box, data); })
      .catch(function (err) { say(box, "Could not draw the graph: " + err.message); });
  }

  function start() {
    var boxes = document.querySelectorAll("div.graph[data-src]");
    for (var i = 0; i < boxes.length; i++) { load(boxes[i]); }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
}());
