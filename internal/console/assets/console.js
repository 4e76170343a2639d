// The console's only script, served from the binary (CSP script-src
// 'self'): it reads /api/overview again every data-refresh milliseconds
// and puts the numbers into the elements marked data-k, as text only.
"use strict";
(function () {
  var root = document.getElementById("overview");
  if (!root) { return; }
  var every = parseInt(root.getAttribute("data-refresh"), 10) || 5000;
  function set(key, text) {
    var els = root.querySelectorAll('[data-k="' + key + '"]');
    for (var i = 0; i < els.length; i++) { els[i].textContent = text; }
  }
  function cell(tr, text, cls) {
    var td = document.createElement("td");
    td.textContent = text;
    if (cls) { td.className = cls; }
    tr.appendChild(td);
  }
  function show(o) {
    set("total", o.total);
    Object.keys(o.byState).forEach(function (s) { set("byState." + s, o.byState[s]); });
    set("staleSent", o.staleSent);
    set("resend", o.resend);
    set("outOfAttempts", o.outOfAttempts);
    set("oldestUnknown", o.oldestUnknown || "none");
    set("oldestSent", o.oldestSent || "none");
    set("read", o.read.replace("T", " ").replace(/\..*|Z$/, ""));
    set("error", o.error ? "; the last read failed: " + o.error : "");
    set("audit.conflicts", o.audit.conflicts);
    set("audit.result", !o.audit.ran ? (o.audit.running ? "running" : "not run") : (o.audit.ok ? "ok" : "BROKEN"));
    var body = root.querySelector('[data-k="byCode"]');
    if (body) {
      while (body.firstChild) { body.removeChild(body.firstChild); }
      (o.byCode || []).forEach(function (c) {
        var tr = document.createElement("tr");
        cell(tr, c.state); cell(tr, c.rspCode || "\u2013"); cell(tr, c.count, "num"); cell(tr, c.meaning);
        body.appendChild(tr);
      });
    }
    root.setAttribute("data-refreshed", o.read);
  }
  function tick() {
    fetch("/api/overview", { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.json(); })
      .then(show)
      .catch(function (e) { set("error", "; refresh failed: " + e.message); })
      .then(function () { setTimeout(tick, every); });
  }
  setTimeout(tick, every);
})();
