// The console's one script: progressive enhancement only. Every page works without it (the
// forms post, the links open, the server says what a recording is); it is a file, never
// inline, so that a Content-Security-Policy can forbid inline scripts.
(function () {
  "use strict";

  // "Listen to the number": play the row's recording from a second before the number.
  // Without JavaScript the link opens the recording at that second (media fragment #t=).
  document.addEventListener("click", function (e) {
    var link = e.target.closest && e.target.closest("a.listen");
    var row = link && link.closest("li");
    var retry = row && !row.querySelector("audio") && row.querySelector(".recording-state button");
    if (retry) retry.click();  // a play that failed for now: the player comes back to try again
    var audio = row && row.querySelector("audio");
    if (!audio) return;
    e.preventDefault();
    var at = parseFloat(link.dataset.at) || 0;
    var play = function () { audio.currentTime = at; audio.play().catch(function () {}); };
    if (audio.readyState >= 1) play(); else { audio.addEventListener("loadedmetadata", play, {once: true}); audio.load(); }
  });

  // A player whose recording fails after the page was drawn (the play route answered 410 or
  // 503, or the network failed): the server is asked what is true now (data-state), and its
  // words replace the player, as the page would say them on a reload. A recording that is
  // gone takes "Listen to the number" with it; one that may play later gets "Try again".
  function say(box, state, text) {
    var audio = box.querySelector("audio");
    var note = document.createElement("p");
    note.className = "recording-state " + state;
    note.setAttribute("role", "status");
    note.textContent = text;
    box.replaceChildren(note);
    var row = box.closest("li");
    if (state === "gone" || state === "none") {
      row.querySelectorAll("a.listen").forEach(function (a) { a.remove(); });
      return;
    }
    var retry = document.createElement("button");
    retry.type = "button";
    retry.className = "secondary";
    retry.textContent = box.dataset.retry;
    retry.addEventListener("click", function () {
      delete box.dataset.failed;
      box.replaceChildren(audio);
      audio.load();
      audio.play().catch(function () {});
    });
    note.append(" ", retry);
  }

  function failed(audio) {
    var box = audio.closest && audio.closest("div.recording");
    if (!box || box.dataset.failed) return;
    box.dataset.failed = "1";
    fetch(box.dataset.state, {credentials: "same-origin", headers: {"Accept": "application/json"}})
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.json(); })
      .then(function (now) {
        // Still playable or re-fetchable by the page's reckoning: the play failed for now.
        say(box, now.state === "gone" || now.state === "none" ? now.state : "unreachable", now.text);
      })
      .catch(function () { say(box, "unreachable", box.dataset.offline); });
  }

  // A media element's error does not bubble: caught on the way down. One that failed before
  // this script ran is found by its error state.
  document.addEventListener("error", function (e) {
    if (e.target instanceof HTMLMediaElement) failed(e.target);
  }, true);
  document.querySelectorAll("div.recording audio").forEach(function (audio) {
    if (audio.error) failed(audio);
  });

  // The inbox's live update (polling): the rows newer than the newest shown, every 5 s,
  // rendered by the server's row template (autoescaped).
  var list = document.querySelector("ul.rows[data-rows]");
  if (list) {
    setInterval(function () {
      fetch(list.dataset.rows + "&after=" + encodeURIComponent(list.dataset.after), {credentials: "same-origin"})
        .then(function (r) { return r.ok ? r.text() : ""; })
        .then(function (html) {
          if (!html.trim()) return;
          var box = document.createElement("ul");
          box.innerHTML = html;
          var rows = box.children;
          for (var i = rows.length - 1; i >= 0; i--) {
            if (document.getElementById(rows[i].id)) continue;
            // Flagged "may be urgent" rows stay first: a new row goes on top of its own group.
            var before = rows[i].classList.contains("urgent") ? list.firstElementChild
              : list.querySelector(":scope > li:not(.urgent)");
            if (rows[i].dataset.created > list.dataset.after) list.dataset.after = rows[i].dataset.created;
            list.insertBefore(rows[i], before);
          }
          var empty = document.querySelector("p.empty");
          if (empty) empty.remove();
        }).catch(function () {});
    }, 5000);
  }
})();
