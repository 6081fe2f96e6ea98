// The console's own script (the Content-Security-Policy allows no inline
// script). When a request htmx sent (a form, a refresh) is refused, the
// gateway answers application/problem+json, as the API does: show its title
// and detail in the page's error region (#console-error, an aria-live
// region) instead of failing silently.
(function () {
  "use strict";

  function region() {
    return document.getElementById("console-error");
  }

  function show(title, detail, code) {
    var r = region();
    if (!r) {
      return;
    }
    r.textContent = "";
    var strong = document.createElement("strong");
    strong.className = "problem-title";
    strong.textContent = title;
    r.appendChild(strong);
    if (detail) {
      r.appendChild(document.createTextNode(": " + detail));
    }
    if (code) {
      r.appendChild(document.createTextNode(" "));
      var c = document.createElement("code");
      c.className = "problem-code";
      c.textContent = code;
      r.appendChild(c);
    }
    r.hidden = false;
  }

  // problemOf reads an answer as a problem; anything else becomes one with
  // the HTTP status as its title.
  function problemOf(xhr) {
    var type = xhr.getResponseHeader("Content-Type") || "";
    if (type.indexOf("application/problem+json") === 0) {
      try {
        var p = JSON.parse(xhr.responseText);
        return { title: p.title || String(xhr.status), detail: p.detail || "", code: p.code || "" };
      } catch (e) {
        // fall through: not the JSON it claims to be
      }
    }
    return { title: String(xhr.status) + " " + (xhr.statusText || "error"), detail: "", code: "" };
  }

  // failedSource is the id of the element whose request failed last: when
  // it succeeds again (a refresh that recovered), the error goes away.
  var failedSource = null;

  document.addEventListener("htmx:responseError", function (e) {
    var p = problemOf(e.detail.xhr);
    failedSource = e.detail.elt && e.detail.elt.id ? e.detail.elt.id : null;
    show(p.title, p.detail, p.code);
  });
  document.addEventListener("htmx:afterRequest", function (e) {
    var r = region();
    if (r && failedSource && e.detail.successful && e.detail.elt && e.detail.elt.id === failedSource) {
      failedSource = null;
      r.hidden = true;
      r.textContent = "";
    }
  });
  document.addEventListener("htmx:sendError", function () {
    show("The gateway could not be reached.", "Check the connection and try again.", "");
  });
})();
