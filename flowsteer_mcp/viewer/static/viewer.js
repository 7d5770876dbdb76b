// FlowSteer viewer: sign-in from `#token=`, then live updates over server-sent events. No framework, no
// inline code (the CSP allows only this file). Pages keep their scroll position: only #canvas or #workflows
// is replaced, never the page, and every replacement bumps document.body.dataset.updates.
"use strict";

(function () {
  const body = document.body;
  const script = document.currentScript;
  const base = script ? new URL(script.src).pathname.replace(/\/static\/viewer\.js$/, "") : body.dataset.base || "";

  function say(message) {
    const status = document.getElementById("sign-in-status");
    if (status) status.textContent = message;
  }

  // The token travels only in the fragment (never sent to the server by the browser) and in one POST header.
  function signIn() {
    const match = /(?:^#|&)token=([^&]*)/.exec(location.hash);
    if (!match) return false;
    const token = decodeURIComponent(match[1]);
    history.replaceState(null, "", location.pathname + location.search);
    say("Signing in…");
    fetch(base + "/session", {
      method: "POST",
      headers: { Authorization: "Bearer " + token },
      credentials: "same-origin",
    })
      .then(function (response) {
        if (response.status === 204) location.reload();
        else say("The token was refused (HTTP " + response.status + ").");
      })
      .catch(function () {
        say("The server could not be reached.");
      });
    return true;
  }

  if (signIn() || body.dataset.signIn) return;

  const canvas = document.getElementById("canvas");
  const table = document.getElementById("workflows");
  if (!canvas && !table) return;

  let queue = Promise.resolve();

  function bump() {
    body.dataset.updates = String(Number(body.dataset.updates || "0") + 1);
  }

  // Fetches run one after another so an older fragment never overwrites a newer one.
  function refresh(url, target, done) {
    queue = queue
      .then(function () {
        return fetch(url, { credentials: "same-origin", headers: { Accept: "text/html-fragment" } });
      })
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.text().then(function (html) {
          target.innerHTML = html;
          done(response);
          bump();
        });
      })
      .catch(function (error) {
        body.dataset.lastError = String(error);
      });
  }

  function refreshCanvas(updatedAt) {
    const url = base + "/w/" + encodeURIComponent(canvas.dataset.workflowId) + "/fragment";
    refresh(url, canvas, function (response) {
      canvas.dataset.updatedAt = response.headers.get("x-updated-at") || String(updatedAt);
    });
  }

  function refreshList() {
    refresh(base + "/list/fragment", table, function () {});
  }

  const source = new EventSource(base + "/events");
  let opened = false;
  source.addEventListener("open", function () {
    // After a reconnect, changes made while the stream was down were not announced: catch up once.
    if (opened) {
      if (canvas) refreshCanvas(canvas.dataset.updatedAt);
      if (table) refreshList();
    }
    opened = true;
  });
  source.addEventListener("changed", function (event) {
    const change = JSON.parse(event.data);
    if (canvas && change.workflow_id === canvas.dataset.workflowId) refreshCanvas(change.updated_at);
    if (table) refreshList();
  });
  source.addEventListener("removed", function (event) {
    const change = JSON.parse(event.data);
    if (canvas && change.workflow_id === canvas.dataset.workflowId) {
      canvas.classList.add("removed");
      canvas.dataset.removed = "1";
      bump();
    }
    if (table) refreshList();
  });
})();
