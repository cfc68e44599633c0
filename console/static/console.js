// The console's one script (no inline script: the Content-Security-Policy allows only this
// file). Every page works without it; it only adds to what the page does.

// "Listen to the number": play the row's recording from a second before the number.
// Without JavaScript the link opens the recording at that second (media fragment #t=).
document.addEventListener("click", function (e) {
  var link = e.target.closest && e.target.closest("a.listen");
  var audio = link && link.closest("li").querySelector("audio");
  if (!audio) return;
  e.preventDefault();
  var at = parseFloat(link.dataset.at) || 0;
  var play = function () { audio.currentTime = at; audio.play().catch(function () {}); };
  if (audio.readyState >= 1) play(); else { audio.addEventListener("loadedmetadata", play, {once: true}); audio.load(); }
});

// The inbox's live update (polling, see README): fetch the rows newer than the newest shown,
// every 5 s. Only on the inbox (its list carries the address of the rows).
(function () {
  var list = document.getElementById("rows");
  if (!list || !list.dataset.rows) return;
  setInterval(function () {
    fetch(list.dataset.rows + "&after=" + encodeURIComponent(list.dataset.after), {credentials: "same-origin"})
      .then(function (r) { return r.ok ? r.text() : ""; })
      .then(function (html) {
        if (!html.trim()) return;
        var box = document.createElement("ul");
        box.innerHTML = html;  // rendered by the server's autoescaping template
        var rows = box.children;
        for (var i = rows.length - 1; i >= 0; i--) {
          if (!document.getElementById(rows[i].id)) list.insertBefore(rows[i], list.firstChild);
        }
        list.dataset.after = list.firstElementChild.dataset.created;
        var empty = document.querySelector("p.empty");
        if (empty) empty.remove();
      }).catch(function () {});
  }, 5000);
})();
