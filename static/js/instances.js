/* Starverse console, instance and cluster pages: the live summary of the Rent and cluster order
   forms, live status on the instance list, and on an instance's or a cluster's page the
   progress, the status and the GPU charts (inline SVG, drawn here; no chart library). Every page
   works without this script: the forms post, and the server renders the current state. */
(function () {
  "use strict";

  /* ---------- Shared ---------- */

  function readJSON(id) {
    var element = document.getElementById(id);
    if (!element) {
      return null;
    }
    try {
      return JSON.parse(element.textContent);
    } catch (error) {
      return null;
    }
  }

  // "{name}" placeholders filled from an object.
  function fill(template, values) {
    return String(template).replace(/\{(\w+)\}/g, function (match, key) {
      return Object.prototype.hasOwnProperty.call(values, key) ? String(values[key]) : match;
    });
  }

  // Whole fen → "¥1,234.56", as the server's |money filter writes it.
  function formatFen(fen) {
    fen = Math.round(Number(fen) || 0);
    var negative = fen < 0;
    fen = Math.abs(fen);
    var yuan = String(Math.floor(fen / 100)).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
    var cents = String(fen % 100);
    return (negative ? "-" : "") + "¥" + yuan + "." + (cents.length < 2 ? "0" + cents : cents);
  }

  function getJSON(url) {
    return fetch(url, {
      credentials: "same-origin",
      headers: { Accept: "application/json" },
      cache: "no-store",
    }).then(function (response) {
      if (!response.ok) {
        throw new Error("HTTP " + response.status);
      }
      return response.json();
    });
  }

  // Run `task` every `ms` while the page is visible; `task` returns a promise.
  function every(ms, task) {
    var timer = null;
    function schedule() {
      window.clearTimeout(timer);
      timer = window.setTimeout(run, ms);
    }
    function run() {
      if (document.hidden) {
        schedule();
        return;
      }
      Promise.resolve()
        .then(task)
        .catch(function () {
          /* a missed poll is retried at the next tick */
        })
        .then(schedule);
    }
    document.addEventListener("visibilitychange", function () {
      if (!document.hidden) {
        window.clearTimeout(timer);
        run();
      }
    });
    schedule();
  }

  var statusLabels = readJSON("status-labels") || {};

  function setBadge(badge, status) {
    if (!badge || badge.getAttribute("data-status") === status) {
      return;
    }
    badge.className = badge.className.replace(/\binst-status-\w+/, "inst-status-" + status);
    badge.setAttribute("data-status", status);
    var label = badge.querySelector("[data-status-label]");
    if (label) {
      label.textContent = statusLabels[status] || status;
    }
  }

  var CAN = {
    stop: ["running", "provisioning"],
    start: ["stopped", "failed"],
    terminate: ["queued", "provisioning", "running", "stopping", "stopped", "failed"],
  };

  function setActions(scope, status) {
    Array.prototype.forEach.call(scope.querySelectorAll("form[data-action]"), function (form) {
      form.hidden = CAN[form.getAttribute("data-action")].indexOf(status) === -1;
    });
  }

  /* ---------- Rent, and the cluster order form ---------- */

  // The cluster order form has a node count: its prices are those of every node together.
  function rentPage(form) {
    var catalog = readJSON("rent-catalog") || {};
    var t = readJSON("rent-i18n") || {};
    var balance = Number(form.getAttribute("data-balance")) || 0;
    var lang = form.getAttribute("data-lang") || "en";

    function out(name) {
      return form.querySelector('[data-sum="' + name + '"]');
    }

    function checked(name) {
      return form.querySelector('input[name="' + name + '"]:checked');
    }

    function plural(forms, count) {
      // English has one and other; Chinese one form for both.
      return count === 1 ? forms[0] : forms[1];
    }

    var count = form.querySelector('input[name="node_count"]');

    function nodes() {
      var n = count ? parseInt(count.value, 10) : 1;
      return n > 0 ? n : 1;
    }

    function covers(offering, n) {
      var hours = Math.floor(balance / (offering.hour * n));
      if (hours < 1) {
        return fill(t.short, { balance: formatFen(balance), price: formatFen(offering.hour * n) });
      }
      var number = new Intl.NumberFormat(lang);
      if (hours < 48) {
        return fill(plural(t.covers_hours, hours), {
          balance: formatFen(balance),
          num: number.format(hours),
        });
      }
      var days = Math.floor(hours / 24);
      return fill(plural(t.covers_days, days), {
        balance: formatFen(balance),
        num: number.format(days),
      });
    }

    function update() {
      var choice = checked("offering");
      var offering = choice ? catalog[choice.value] : null;
      var monthly = form.querySelector('input[name="billing"][value="monthly"]');
      var hourly = form.querySelector('input[name="billing"][value="hourly"]');
      var monthOffered = !!(offering && offering.month);
      if (monthly) {
        monthly.disabled = !monthOffered;
        monthly.closest(".choice").classList.toggle("is-disabled", !monthOffered);
        if (!monthOffered && monthly.checked && hourly) {
          hourly.checked = true;
        }
      }
      var billing = checked("billing");
      var isMonthly = !!(billing && billing.value === "monthly");
      var image = checked("image");
      var n = nodes();

      out("offering").textContent = offering ? offering.name + (count ? " × " + n : "") : "—";
      out("image").textContent = image
        ? image.closest(".choice").querySelector("strong").textContent
        : "—";
      out("billing").textContent = isMonthly ? t.monthly : t.hourly;
      // an hour as charged now: at the trial price while trial credit pays (pay as you go)
      var onTrialPrice = !!offering && !isMonthly && !!offering.after;
      var hourNow = offering ? (onTrialPrice ? offering.now : offering.hour) : 0;
      out("price").textContent = offering ? formatFen(hourNow * n) : "—";
      var after = out("after");
      if (after) {
        after.hidden = !onTrialPrice;
        after.textContent = onTrialPrice ? fill(t.after, { price: formatFen(offering.after * n) }) : "";
      }
      var perNode = out("per-node");
      if (perNode) {
        perNode.textContent = offering
          ? fill(t.per_node, { price: formatFen(hourNow), nodes: n })
          : "";
      }
      var month = out("month");
      month.hidden = !monthOffered;
      month.textContent = monthOffered
        ? fill(t.month_line, { price: formatFen(offering.month * n) })
        : "";
      // short of an hour in cash but covered by the trial credit (rent page): what it buys
      var onTrial = !!offering && balance < offering.hour * n && !!offering.trial_covers;
      out("covers").textContent = onTrial ? offering.trial_line : offering ? covers(offering, n) : "";
      out("covers").classList.toggle(
        "is-short",
        !!offering && balance < offering.hour * n && !onTrial
      );
      var trial = out("trial");
      if (trial) {
        trial.textContent = !onTrial && offering && offering.trial_line ? offering.trial_line : "";
        trial.hidden = !trial.textContent;
      }
      var short = out("month-short");
      short.hidden = !(isMonthly && monthOffered && balance < offering.month * n);
      short.textContent = short.hidden
        ? ""
        : fill(t.month_short, { price: formatFen(offering.month * n) });
      out("queue").hidden = !offering || offering.available >= n;
      // Whether each offering's first start with the chosen image pulls it, and for how long.
      Array.prototype.forEach.call(form.querySelectorAll(".offer"), function (label) {
        var line = label.querySelector("[data-pull]");
        var input = label.querySelector('input[name="offering"]');
        var pulls = input && catalog[input.value] ? catalog[input.value].pulls || {} : {};
        var pull = image ? pulls[image.value] : null;
        if (line && pull) {
          line.textContent = pull.text;
          line.classList.toggle("is-warm", pull.warm);
        }
      });

      Array.prototype.forEach.call(form.querySelectorAll(".offer, .choice"), function (label) {
        var input = label.querySelector("input");
        label.classList.toggle("is-selected", !!(input && input.checked));
      });
    }

    form.addEventListener("change", update);
    if (count) {
      count.addEventListener("input", update);
    }
    var submitted = false;
    form.addEventListener("submit", function (event) {
      // The token makes a second submission harmless; this only spares the round trip.
      if (submitted) {
        event.preventDefault();
        return;
      }
      submitted = true;
      var button = form.querySelector("[data-submit]");
      if (button) {
        window.setTimeout(function () {
          button.classList.add("is-disabled");
          button.setAttribute("aria-disabled", "true");
        }, 0);
      }
    });
    window.addEventListener("pageshow", function () {
      submitted = false;
      var button = form.querySelector("[data-submit]");
      if (button) {
        button.classList.remove("is-disabled");
        button.removeAttribute("aria-disabled");
      }
    });
    update();
  }

  /* ---------- Instance list ---------- */

  // A node's name, with a line-break opportunity after each dot and slash (the template's |wbr).
  function breakable(element, text) {
    element.textContent = "";
    text.split(/(?<=[.\/])/).forEach(function (part, index) {
      if (index) {
        element.appendChild(document.createElement("wbr"));
      }
      element.appendChild(document.createTextNode(part));
    });
  }

  function listPage(section) {
    var url = section.getAttribute("data-instances-poll");
    every(5000, function () {
      return getJSON(url).then(function (data) {
        (data.results || []).forEach(function (item) {
          var row = section.querySelector('tr[data-instance="' + item.id + '"]');
          if (!row) {
            return;
          }
          setBadge(row.querySelector("[data-status-badge]"), item.status);
          var cost = row.querySelector('[data-field="cost"]');
          if (cost) {
            cost.textContent = formatFen(item.cost_fen);
          }
          var node = row.querySelector('[data-field="node"]');
          if (node) {
            breakable(node, item.node || "—");
          }
          setActions(row, item.status);
        });
      });
    });
  }

  /* ---------- Time ---------- */

  function timeParts(date, tz) {
    var options = {
      year: "numeric",
      month: "2-digit",
      day: "2-digit",
      hour: "2-digit",
      minute: "2-digit",
      second: "2-digit",
      hourCycle: "h23",
    };
    var parts = {};
    try {
      new Intl.DateTimeFormat("en-GB", Object.assign({ timeZone: tz }, options))
        .formatToParts(date)
        .forEach(function (part) {
          parts[part.type] = part.value;
        });
    } catch (error) {
      var pad = function (n) {
        return (n < 10 ? "0" : "") + n;
      };
      parts = {
        year: String(date.getFullYear()),
        month: pad(date.getMonth() + 1),
        day: pad(date.getDate()),
        hour: pad(date.getHours()),
        minute: pad(date.getMinutes()),
        second: pad(date.getSeconds()),
      };
    }
    return parts;
  }

  function formatDateTime(date, tz) {
    var p = timeParts(date, tz);
    return p.year + "-" + p.month + "-" + p.day + " " + p.hour + ":" + p.minute + ":" + p.second;
  }

  function formatClock(date, tz) {
    var p = timeParts(date, tz);
    return p.hour + ":" + p.minute;
  }

  /* ---------- Charts ---------- */

  var SVG = "http://www.w3.org/2000/svg";
  var COLORS = ["#5b4cf0", "#0d9f6e", "#e8590c", "#1f6fd1", "#d6336c", "#b8860b", "#0b8ea3", "#5c677d"];
  var METRICS = {
    util: {
      value: function (s) {
        return s.util;
      },
      max: function () {
        return 100;
      },
      format: function (v) {
        return Math.round(v) + " %";
      },
    },
    mem: {
      value: function (s) {
        return s.mem_used_mb == null ? null : s.mem_used_mb / 1024;
      },
      max: function (high, charts) {
        var memory = Number(charts.getAttribute("data-memory-gb")) || 0;
        return memory >= high ? memory : niceCeil(high);
      },
      format: function (v) {
        return (v >= 10 ? Math.round(v) : v.toFixed(1)) + " GB";
      },
    },
    temp: {
      value: function (s) {
        return s.temp_c;
      },
      max: function (high) {
        return Math.max(100, niceCeil(high));
      },
      format: function (v) {
        return Math.round(v) + " °C";
      },
    },
    power: {
      value: function (s) {
        return s.power_w;
      },
      max: function (high) {
        return niceCeil(Math.max(high, 50));
      },
      format: function (v) {
        return Math.round(v) + " W";
      },
    },
  };

  // An endpoint's series (endpointCharts): each line's samples carry `value`.
  function seriesMetric(format) {
    return {
      value: function (s) {
        return s.value;
      },
      max: function (high) {
        return niceCeil(high);
      },
      format: format,
    };
  }
  function rounded(unit) {
    return function (v) {
      return (v >= 10 ? Math.round(v) : Math.round(v * 10) / 10) + unit;
    };
  }
  METRICS.ep_requests = seriesMetric(rounded(" /s"));
  METRICS.ep_latency = seriesMetric(rounded(" ms"));
  METRICS.ep_tokens = seriesMetric(rounded(" /s"));
  METRICS.ep_replicas = seriesMetric(function (v) {
    return String(Math.round(v));
  });

  function niceCeil(value) {
    if (!(value > 0)) {
      return 1;
    }
    var power = Math.pow(10, Math.floor(Math.log10(value)));
    var steps = [1, 2, 2.5, 5, 10];
    for (var i = 0; i < steps.length; i++) {
      if (value <= steps[i] * power) {
        return steps[i] * power;
      }
    }
    return 10 * power;
  }

  // The smallest of 1, 2, 5, 10, 20, 50… that reaches `high` in at most four steps.
  function wholeStep(high) {
    var power = 1;
    for (;;) {
      var steps = [1, 2, 5];
      for (var i = 0; i < steps.length; i++) {
        if (steps[i] * power * 4 >= high) {
          return steps[i] * power;
        }
      }
      power *= 10;
    }
  }

  function svg(tag, attrs, parent) {
    var element = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (key) {
      element.setAttribute(key, attrs[key]);
    });
    if (parent) {
      parent.appendChild(element);
    }
    return element;
  }

  function axisLabel(value) {
    return value >= 1000 ? Math.round(value / 100) / 10 + "k" : String(Math.round(value * 10) / 10);
  }

  function drawChart(figure, metrics, charts, t, tz) {
    var key = figure.getAttribute("data-metric");
    var metric = METRICS[key];
    var plot = figure.querySelector(".chart-plot");
    var legend = figure.querySelector(".chart-legend");
    var series = metrics.map(function (gpu, index) {
      return {
        label: gpu.label || fill(t.gpu, { index: gpu.gpu }),
        color: COLORS[index % COLORS.length],
        points: gpu.samples.map(function (s) {
          return [Date.parse(s.at), metric.value(s)];
        }),
      };
    });

    var t0 = Infinity;
    var t1 = -Infinity;
    var high = 0;
    series.forEach(function (line) {
      line.points.forEach(function (point) {
        t0 = Math.min(t0, point[0]);
        t1 = Math.max(t1, point[0]);
        if (point[1] != null) {
          high = Math.max(high, point[1]);
        }
      });
    });
    if (!isFinite(t0)) {
      return;
    }
    if (t1 - t0 < 120000) {
      t0 = t1 - 120000;
    }
    var yMax = metric.max(high, charts);
    var ticks = 4;
    // Counts (replicas, requests) step by whole numbers: 0 1 2 3 4, never 1.3 / 2.5 / 3.8.
    var whole = series.every(function (line) {
      return line.points.every(function (point) {
        return point[1] == null || Number.isInteger(point[1]);
      });
    });
    if (whole && !Number.isInteger(yMax / ticks)) {
      var step = wholeStep(high);
      ticks = Math.max(1, Math.ceil(high / step));
      yMax = step * ticks;
    }

    var width = Math.max(plot.clientWidth, 200);
    var height = 150;
    var pad = { left: 34, right: 8, top: 8, bottom: 22 };
    var w = width - pad.left - pad.right;
    var h = height - pad.top - pad.bottom;
    function x(time) {
      return pad.left + ((time - t0) / (t1 - t0)) * w;
    }
    function y(value) {
      return pad.top + h - (Math.min(value, yMax) / yMax) * h;
    }

    var root = svg("svg", {
      width: width,
      height: height,
      viewBox: "0 0 " + width + " " + height,
      class: "chart-svg",
      "aria-hidden": "true",
    });
    for (var i = 0; i <= ticks; i++) {
      var value = (yMax * i) / ticks;
      var gy = y(value);
      svg("line", { x1: pad.left, x2: width - pad.right, y1: gy, y2: gy, class: "chart-grid" }, root);
      svg("text", { x: pad.left - 6, y: gy + 3.5, class: "chart-tick chart-tick-y", "text-anchor": "end" }, root)
        .textContent = axisLabel(value);
    }
    [t0, (t0 + t1) / 2, t1].forEach(function (time, index) {
      svg("text", {
        x: x(time),
        y: height - 6,
        class: "chart-tick",
        "text-anchor": index === 0 ? "start" : index === 2 ? "end" : "middle",
      }, root).textContent = formatClock(new Date(time), tz);
    });

    // A gap of more than a minute without samples breaks the line.
    series.forEach(function (line) {
      var runs = [];
      var run = [];
      var last = null;
      line.points.forEach(function (point) {
        if (point[1] == null || (last !== null && point[0] - last > 60000)) {
          if (run.length) {
            runs.push(run);
          }
          run = [];
        }
        if (point[1] != null) {
          run.push(point);
        }
        last = point[0];
      });
      if (run.length) {
        runs.push(run);
      }
      runs.forEach(function (points) {
        var path = points
          .map(function (point, index) {
            return (index ? "L" : "M") + x(point[0]).toFixed(1) + " " + y(point[1]).toFixed(1);
          })
          .join(" ");
        if (series.length === 1 && points.length > 1) {
          svg("path", {
            d: path + " L" + x(points[points.length - 1][0]).toFixed(1) + " " + y(0) +
              " L" + x(points[0][0]).toFixed(1) + " " + y(0) + " Z",
            fill: line.color,
            class: "chart-area",
          }, root);
        }
        if (points.length === 1) {
          svg("circle", { cx: x(points[0][0]), cy: y(points[0][1]), r: 2.5, fill: line.color }, root);
        } else {
          svg("path", { d: path, stroke: line.color, class: "chart-line" }, root);
        }
      });
    });
    plot.textContent = "";
    plot.appendChild(root);

    legend.textContent = "";
    series.forEach(function (line) {
      var latest = null;
      for (var k = line.points.length - 1; k >= 0; k--) {
        if (line.points[k][1] != null) {
          latest = line.points[k][1];
          break;
        }
      }
      var item = document.createElement("li");
      var swatch = document.createElement("span");
      swatch.className = "chart-swatch";
      swatch.style.background = line.color;
      var name = document.createElement("span");
      name.textContent = line.label;
      var reading = document.createElement("strong");
      reading.textContent = latest == null ? "—" : metric.format(latest);
      item.appendChild(swatch);
      item.appendChild(name);
      item.appendChild(reading);
      legend.appendChild(item);
    });
  }

  function drawCharts(metrics, t, tz) {
    var charts = document.getElementById("charts");
    var empty = document.getElementById("charts-empty");
    if (!charts) {
      return;
    }
    var any = metrics.some(function (gpu) {
      return gpu.samples && gpu.samples.length;
    });
    charts.hidden = !any;
    if (empty) {
      empty.hidden = any;
    }
    if (!any) {
      return;
    }
    Array.prototype.forEach.call(charts.querySelectorAll(".chart"), function (figure) {
      drawChart(figure, metrics, charts, t, tz);
    });
  }

  /* ---------- Timeline ---------- */

  // Add the events after those shown; `prefix(event)` is text put before each message.
  function appendEvents(timeline, scroller, events, tz, prefix) {
    if (!timeline) {
      return;
    }
    var shown = timeline.children.length;
    events.slice(shown).forEach(function (event) {
      var item = document.createElement("li");
      item.className = "tl-item tl-" + event.status + " is-new";
      var dot = document.createElement("span");
      dot.className = "inst-dot";
      dot.setAttribute("aria-hidden", "true");
      var body = document.createElement("div");
      body.className = "tl-body";
      var time = document.createElement("time");
      time.setAttribute("datetime", event.at);
      time.textContent = formatDateTime(new Date(event.at), tz);
      var message = document.createElement("p");
      if (prefix) {
        var label = document.createElement("span");
        label.className = "strong";
        label.textContent = prefix(event);
        message.appendChild(label);
        message.appendChild(document.createTextNode(" · "));
      }
      message.appendChild(document.createTextNode(event.text || event.message));
      body.appendChild(time);
      body.appendChild(message);
      // A Kubernetes event told as a sentence keeps what the cluster said one click away.
      if (event.text && event.text !== event.message) {
        var raw = document.createElement("details");
        raw.className = "tl-raw";
        var summary = document.createElement("summary");
        summary.textContent = timeline.getAttribute("data-raw-label") || "";
        var code = document.createElement("code");
        code.textContent = event.message;
        raw.appendChild(summary);
        raw.appendChild(code);
        body.appendChild(raw);
      }
      item.appendChild(dot);
      item.appendChild(body);
      timeline.appendChild(item);
    });
    if (scroller && events.length > shown) {
      scroller.scrollTop = scroller.scrollHeight;
    }
  }

  /* ---------- Instance and cluster pages ---------- */

  // A live page (an instance's or a cluster's): its charts drawn by `draw(metrics, t, tz)`
  // and redrawn on resize; its status, cost and queue place polled (a new status reloads the
  // page, which then offers what that status allows); its timeline extended while the status
  // is transient, each message after `prefix(event, t)` when given; its metrics polled while
  // `chartsLive(status)`.
  function livePage(page, draw, prefix, chartsLive) {
    var status = page.getAttribute("data-status");
    var tz = page.getAttribute("data-tz") || undefined;
    var transient = page.getAttribute("data-transient") === "true";
    var t = readJSON("metrics-i18n") || {};
    var metrics = readJSON("metrics-data") || [];
    var timeline = document.getElementById("timeline");
    var scroller = document.getElementById("timeline-scroll");
    var label = prefix
      ? function (event) {
          return prefix(event, t);
        }
      : null;
    // The newest step is at the bottom of a long history.
    if (scroller) {
      scroller.scrollTop = scroller.scrollHeight;
    }

    draw(metrics, t, tz);
    var resizeTimer = null;
    window.addEventListener("resize", function () {
      window.clearTimeout(resizeTimer);
      resizeTimer = window.setTimeout(function () {
        draw(metrics, t, tz);
      }, 150);
    });

    function refresh() {
      return getJSON(page.getAttribute("data-api")).then(function (data) {
        if (data.status !== status) {
          // A new status changes what the page offers (SSH, ranks, actions): show it afresh.
          window.location.reload();
          return null;
        }
        var cost = page.querySelector('[data-field="cost"]');
        if (cost) {
          cost.textContent = formatFen(data.cost_fen);
        }
        var queue = page.querySelector('[data-field="queue"]');
        if (queue && data.queue_position) {
          queue.textContent = String(data.queue_position);
        }
        if (transient) {
          return getJSON(page.getAttribute("data-events")).then(function (events) {
            appendEvents(timeline, scroller, events.results || [], tz, label);
          });
        }
        return null;
      });
    }

    if (status === "terminated") {
      return;
    }
    every(transient ? 3000 : 15000, refresh);
    if (chartsLive(status)) {
      every(15000, function () {
        return getJSON(page.getAttribute("data-metrics")).then(function (data) {
          metrics = data.results || [];
          draw(metrics, t, tz);
        });
      });
    }
  }

  function detailPage(page) {
    livePage(page, drawCharts, null, function (status) {
      return status === "running" || status === "provisioning";
    });
  }

  // One small utilisation chart per rank, drawn by the instance page's chart code.
  function drawRankCharts(ranks, t, tz) {
    var charts = document.getElementById("charts");
    if (!charts) {
      return;
    }
    ranks.forEach(function (rank) {
      var figure = charts.querySelector('.chart[data-rank="' + rank.rank + '"]');
      var any = (rank.gpus || []).some(function (gpu) {
        return gpu.samples && gpu.samples.length;
      });
      if (figure && any) {
        drawChart(figure, rank.gpus, charts, t, tz);
      }
    });
  }

  function clusterPage(page) {
    livePage(
      page,
      drawRankCharts,
      function (event, t) {
        // a rank scaled away has no rank any more
        return event.rank === null ? t.removed : fill(t.rank, { rank: event.rank });
      },
      function (status) {
        return status !== "stopped" && status !== "queued";
      }
    );
  }

  // An endpoint's page: requests/s, latency p50/p99, tokens/s and replicas over time, from
  // the rows of GET /endpoints/{id}/metrics, drawn as the instance page's charts are.
  var ENDPOINT_LINES = {
    ep_requests: ["requests_per_s"],
    ep_latency: ["latency_p50_ms", "latency_p99_ms"],
    ep_tokens: ["tokens_per_s"],
    ep_replicas: ["replicas_ready"],
  };

  function drawEndpointCharts(rows, t, tz) {
    var charts = document.getElementById("charts");
    if (!charts || !rows.length) {
      return;
    }
    charts.hidden = false;
    var table = document.getElementById("series-table");
    if (table) {
      table.open = false; // the charts show it; the table stays a click away
    }
    Array.prototype.forEach.call(charts.querySelectorAll(".chart"), function (figure) {
      var lines = ENDPOINT_LINES[figure.getAttribute("data-metric")] || [];
      drawChart(
        figure,
        lines.map(function (field) {
          return {
            label: (t.lines || {})[field] || field,
            samples: rows.map(function (row) {
              return { at: row.ts, value: row[field] };
            }),
          };
        }),
        charts,
        t,
        tz
      );
    });
  }

  function endpointPage(page) {
    livePage(page, drawEndpointCharts, null, function (status) {
      return status !== "deleting" && status !== "deleted";
    });
  }

  // "Serve a model": only the chosen engine's options (and its cold start) show; without
  // JavaScript every engine's show, each under its name, and the view reads the chosen one's.
  function endpointForm(form) {
    function update() {
      var chosen = form.querySelector("input[data-engine-pick]:checked");
      var engine = chosen ? chosen.value : "";
      Array.prototype.forEach.call(form.querySelectorAll("[data-engine-options]"), function (set) {
        var mine = set.getAttribute("data-engine-options") === engine;
        set.hidden = !mine;
        set.disabled = !mine;
      });
      Array.prototype.forEach.call(form.querySelectorAll("li[data-engine]"), function (item) {
        item.hidden = item.getAttribute("data-engine") !== engine;
      });
    }
    form.addEventListener("change", function (event) {
      if (event.target.hasAttribute("data-engine-pick")) {
        update();
      }
    });
    update();
  }

  /* ---------- Start ---------- */

  function start() {
    var rent = document.getElementById("rent-form") || document.getElementById("cluster-form");
    if (rent) {
      rentPage(rent);
    }
    var list = document.querySelector("[data-instances-poll]");
    if (list) {
      listPage(list);
    }
    var page = document.getElementById("instance-page");
    if (page) {
      detailPage(page);
    }
    var endpointNew = document.getElementById("endpoint-form");
    if (endpointNew) {
      endpointForm(endpointNew);
    }
    var endpointView = document.getElementById("endpoint-page");
    if (endpointView) {
      endpointPage(endpointView);
    }
    var clusterView = document.getElementById("cluster-page");
    if (clusterView) {
      clusterPage(clusterView);
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
