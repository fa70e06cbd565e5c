// The viewer's only script. It never builds markup from data: new rows and token details are
// set with textContent, so agent output stays text.
(function () {
  "use strict";
  var body = document.body;
  var POLL_MS = 1000;
  var added = 0;

  function show(tab) {
    document.querySelectorAll(".pane").forEach(function (pane) {
      pane.hidden = pane.dataset.pane !== tab;
    });
    document.querySelectorAll("button.tab").forEach(function (button) {
      button.classList.toggle("active", button.dataset.tab === tab);
    });
  }
  document.querySelectorAll("button.tab").forEach(function (button) {
    button.addEventListener("click", function () { show(button.dataset.tab); });
  });
  if (location.hash === "#tokens") { show("tokens"); }

  document.querySelectorAll(".tokens").forEach(function (box) {
    box.addEventListener("click", function (event) {
      var token = event.target.closest(".tok");
      if (!token) { return; }
      var detail = box.parentNode.querySelector(".tokdetail");
      detail.textContent = "token " + token.dataset.i + " · id " + token.dataset.id +
        " · text " + JSON.stringify(token.textContent) +
        " · loss mask " + (token.dataset.mask || "— (prompt)") +
        " · logprob " + (token.dataset.lp || "—") + " · " + token.dataset.origin +
        " · policy versions " + (token.dataset.pv || "—");
    });
  });

  var form = document.getElementById("filters");
  function values() {
    var data = {};
    new FormData(form).forEach(function (value, key) { data[key] = String(value); });
    return data;
  }
  function matches(row, query) {
    return (!query.task || row.dataset.task === query.task) &&
      (!query.phase || row.dataset.phase === query.phase) &&
      (!query.status || row.dataset.status === query.status) &&
      (query.outcome === "all" || row.dataset.outcome === query.outcome) &&
      (!query.q || row.dataset.search.indexOf(query.q.toLowerCase()) >= 0);
  }
  function filterRows() {
    var query = values(), rows = document.querySelectorAll("#rollouts tr.rollout"), shown = 0;
    rows.forEach(function (row) {
      row.hidden = !matches(row, query);
      shown += row.hidden ? 0 : 1;
    });
    document.getElementById("matched").textContent = shown + " of " + rows.length + " match.";
  }
  if (form && body.dataset.mode === "bundle") {
    var params = new URLSearchParams(location.search);
    params.forEach(function (value, key) {
      if (form.elements[key]) { form.elements[key].value = value; }
    });
    form.addEventListener("submit", function (event) { event.preventDefault(); filterRows(); });
    filterRows();
  }

  function addRow(tbody, row) {
    var tr = document.createElement("tr");
    tr.className = "rollout new " + (row.failed ? "bad" : "ok") + (row.demo ? " demo" : "");
    row.cells.forEach(function (text, index) {
      var td = document.createElement("td");
      if (index === 0) {
        var link = document.createElement("a");
        link.href = "rollout/" + row.number + ".html";
        link.textContent = text;
        td.appendChild(link);
      } else {
        td.textContent = text;
      }
      tr.appendChild(td);
    });
    tbody.insertBefore(tr, tbody.firstChild);
  }
  function showInflight(inflight) {
    var section = document.getElementById("inflight");
    if (!section) { return; }
    section.hidden = !inflight;  // no file: nothing in flight, or the run finished
    if (!inflight) { return; }
    var tbody = section.querySelector("tbody");
    while (tbody.firstChild) { tbody.removeChild(tbody.firstChild); }
    inflight.rows.forEach(function (cells) {
      var tr = document.createElement("tr");
      cells.forEach(function (text) {
        var td = document.createElement("td");
        td.textContent = text;
        tr.appendChild(td);
      });
      tbody.appendChild(tr);
    });
    document.getElementById("inflight-stale").hidden = !inflight.stale;
    document.getElementById("inflight-age").textContent = String(Math.round(inflight.age_s));
    document.getElementById("inflight-count").textContent = inflight.rows.length + " in flight.";
  }
  function poll() {
    var params = new URLSearchParams(values());
    params.set("after", body.dataset.total);
    fetch("rows.json?" + params.toString(), {credentials: "same-origin"})
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (data) {
        if (data) {
          var tbody = document.querySelector("#rollouts tbody");
          data.rows.forEach(function (row) { addRow(tbody, row); });
          if (data.rows.length) {
            added += data.rows.length;
            document.getElementById("matched").textContent =
              added + " new since this page opened (at the top); reload for the phase results.";
          }
          showInflight(data.inflight);
          body.dataset.total = String(data.total);
          document.getElementById("total").textContent = String(data.total);
          var live = document.getElementById("live");
          if (live && !data.live) { live.textContent = "finished or idle"; }
        }
        setTimeout(poll, POLL_MS);
      })
      .catch(function () { setTimeout(poll, 5 * POLL_MS); });
  }
  if (form && body.dataset.mode === "server") { setTimeout(poll, POLL_MS); }
  body.dataset.ok = "1";
})();
