/* Starverse console, a job's page: the log viewer follows the program while it runs, and the
   page is read again when the job's status changes (the server renders each state). The page
   works without this script: it shows the log as it was when loaded, and Download has it all.

   The viewer polls /console/jobs/<id>/logs/?tail=200 every 2 s rather than reading the API's
   follow stream: each poll is a short request (a follow holds a web worker for up to
   JOB_LOG_FOLLOW_S and needs reconnecting after it), it shows the same last lines whatever was
   missed while the tab was hidden or the network dropped, and it stops by itself when the
   answer says the run is over (X-Starverse-Live: 0). */
(function () {
  "use strict";

  var LOG_MS = 2000;
  var STATUS_MS = 3000;

  function poll(ms, task) {
    var timer = null;
    var stopped = false;
    function run() {
      if (stopped) {
        return;
      }
      if (document.hidden) {
        timer = window.setTimeout(run, ms);
        return;
      }
      Promise.resolve()
        .then(task)
        .catch(function () {
          return true; /* a missed poll is tried again at the next tick */
        })
        .then(function (more) {
          if (more === false) {
            stopped = true;
          } else {
            timer = window.setTimeout(run, ms);
          }
        });
    }
    document.addEventListener("visibilitychange", function () {
      if (!document.hidden && !stopped) {
        window.clearTimeout(timer);
        run();
      }
    });
    run();
  }

  function logViewer(box) {
    var state = document.getElementById("job-log-state");
    function atBottom() {
      return box.scrollHeight - box.scrollTop - box.clientHeight < 24;
    }
    function read() {
      return fetch(box.getAttribute("data-src"), {
        credentials: "same-origin",
        headers: { Accept: "text/plain" },
        cache: "no-store",
      }).then(function (response) {
        if (!response.ok) {
          throw new Error("HTTP " + response.status);
        }
        var live = response.headers.get("X-Starverse-Live") === "1";
        return response.text().then(function (text) {
          var follow = atBottom();
          box.textContent = text || box.getAttribute("data-empty");
          box.classList.toggle("is-empty", !text);
          if (follow) {
            box.scrollTop = box.scrollHeight;
          }
          box.setAttribute("data-live", live ? "true" : "false");
          if (state) {
            state.textContent = box.getAttribute(live ? "data-following" : "data-stopped");
          }
          return live;
        });
      });
    }
    box.scrollTop = box.scrollHeight;
    poll(LOG_MS, read);
  }

  function statusWatch(page) {
    var shown = page.getAttribute("data-status");
    poll(STATUS_MS, function () {
      return fetch(page.getAttribute("data-api"), {
        credentials: "same-origin",
        headers: { Accept: "application/json" },
        cache: "no-store",
      })
        .then(function (response) {
          if (!response.ok) {
            throw new Error("HTTP " + response.status);
          }
          return response.json();
        })
        .then(function (job) {
          if (job.status !== shown) {
            window.location.reload();
            return false;
          }
          return true;
        });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var page = document.getElementById("job-page");
    if (!page) {
      return;
    }
    var box = document.getElementById("job-log");
    if (box) {
      logViewer(box);
    }
    if (page.getAttribute("data-ended") !== "true") {
      statusWatch(page);
    }
  });
})();
