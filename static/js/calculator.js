/* Starverse cost calculator (templates/billing/calculator.html).
   Reads the form, converts what people type (yuan, days, kW …) into the exact values of
   POST /api/v1/calculator/tco (whole fen as JSON integers, other decimals as strings), and
   renders the answer. Money never goes through a float: inputs are parsed as decimal strings
   and every amount is formatted and compared as a BigInt number of fen.
   The page opens on the first preset, or the one named in the URL hash (#node_8xh100);
   query-string values (?gpus=2048&buy.gpu_price=300000) then replace single fields. */
(function () {
  "use strict";

  var root = document.getElementById("calc");
  if (!root || typeof BigInt !== "function" || !window.fetch) {
    return;
  }
  var form = document.getElementById("calc-form");
  var presets = JSON.parse(document.getElementById("calc-presets").textContent);
  var t = JSON.parse(document.getElementById("calc-i18n").textContent);
  // inputs, and selects (the Starverse offering, from the catalog: data-kind "text")
  var inputs = Array.prototype.slice.call(form.querySelectorAll("[data-path]"));
  var presetButtons = Array.prototype.slice.call(root.querySelectorAll("[data-preset]"));
  var results = document.getElementById("calc-results");
  var statusBox = document.getElementById("calc-status");
  var errorBox = document.getElementById("calc-error");
  var verdict = document.getElementById("calc-verdict");
  var OPTIONS = ["buy", "cloud", "starverse"];
  var ZERO = BigInt(0);
  var DEBOUNCE_MS = 300;

  // Decimal places the API keeps (6); a price typed in yuan may have 2 more, being fen × 100.
  var PLACES = { number: 6, "yuan-rate": 8, yuan: 2, int: 0 };

  function fill(template, values) {
    return String(template).replace(/\{(\w+)\}/g, function (whole, key) {
      return Object.prototype.hasOwnProperty.call(values, key) ? values[key] : whole;
    });
  }

  /* ---------- Exact numbers ---------- */

  function toBig(value) {
    if (typeof value === "bigint") {
      return value;
    }
    if (typeof value === "number" && !Number.isSafeInteger(value)) {
      throw new Error("not an exact integer: " + value);
    }
    return BigInt(value);
  }

  function group(digits) {
    return digits.replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  }

  // 123456789n → "¥1,234,567.89"; symbol=false → "1,234,567.89".
  function formatFen(value, symbol) {
    var fen = toBig(value);
    var negative = fen < ZERO;
    var digits = (negative ? -fen : fen).toString();
    while (digits.length < 3) {
      digits = "0" + digits;
    }
    var text = group(digits.slice(0, -2)) + "." + digits.slice(-2);
    return (negative ? "-" : "") + (symbol === false ? "" : "¥") + text;
  }

  // part / whole as a percentage with one decimal, rounded half-up: "51.2%".
  function percent(part, whole) {
    var tenths = (BigInt(2000) * part + whole) / (BigInt(2) * whole);
    var ten = BigInt(10);
    return (tenths / ten).toString() + "." + (tenths % ten).toString() + "%";
  }

  // A decimal given as a number or string ("120", "12.5") moved two places left: fen → yuan.
  function fenToYuanText(value) {
    var match = /^(-?)(\d+)(?:\.(\d+))?$/.exec(String(value));
    if (!match) {
      return String(value);
    }
    var whole = match[2];
    while (whole.length < 3) {
      whole = "0" + whole;
    }
    var frac = (whole.slice(-2) + (match[3] || "")).replace(/0+$/, "");
    while (frac.length < 2) {
      frac += "0";
    }
    return match[1] + group(whole.slice(0, -2).replace(/^0+(?=\d)/, "")) + "." + frac;
  }

  // What people type → {sign, whole, frac} of a plain decimal, or null. Accepts thousands
  // separators, spaces, a ¥ sign and full-width digits (as typed with a Chinese IME).
  function parseDecimal(text) {
    var cleaned = String(text)
      .replace(/[\uFF10-\uFF19]/g, function (c) {
        return String.fromCharCode(c.charCodeAt(0) - 0xfee0);
      })
      .replace(/[\uFF0E\u3002]/g, ".")
      .replace(/[\uFF0D\u2212]/g, "-")
      .replace(/[\s,\uFF0C¥\uFFE5]/g, "");
    var match = /^([-+]?)(\d*)(?:\.(\d*))?$/.exec(cleaned);
    if (!match || !(match[2] + (match[3] || ""))) {
      return null;
    }
    return {
      sign: match[1] === "-" ? "-" : "",
      whole: match[2].replace(/^0+(?=\d)/, "") || "0",
      frac: (match[3] || "").replace(/0+$/, ""),
    };
  }

  // A JSON integer written from its digits, so that it never passes through a float.
  function Raw(digits) {
    this.digits = digits;
  }

  // The text of an input of this kind → {value} for the API, {error} or {missing}.
  function readText(kind, text) {
    text = String(text).trim();
    if (!text) {
      return { missing: true };
    }
    if (kind === "text") {
      return { value: text };
    }
    var number = parseDecimal(text);
    if (!number || number.frac.length > PLACES[kind]) {
      if (kind === "int") {
        return { error: t.int };
      }
      if (kind === "yuan") {
        return { error: t.yuan };
      }
      return { error: fill(t.number, { places: PLACES[kind] }) };
    }
    var sign = number.whole === "0" && !number.frac ? "" : number.sign;
    if (kind === "int") {
      return { value: new Raw(sign + number.whole) };
    }
    if (kind === "yuan") {
      var fen = (number.whole + (number.frac + "00").slice(0, 2)).replace(/^0+(?=\d)/, "");
      return { value: new Raw(sign + fen) };
    }
    if (kind === "yuan-rate") {
      var padded = number.frac + "00";
      var fenWhole = (number.whole + padded.slice(0, 2)).replace(/^0+(?=\d)/, "");
      var rest = padded.slice(2).replace(/0+$/, "");
      return { value: sign + fenWhole + (rest ? "." + rest : "") };
    }
    // number: whole values as JSON integers, fractions as exact strings.
    if (!number.frac) {
      return { value: new Raw(sign + number.whole) };
    }
    return { value: sign + number.whole + "." + number.frac };
  }

  function readInput(input) {
    return readText(input.getAttribute("data-kind"), input.value);
  }

  // An API value → the text shown in an input of this kind.
  function showValue(kind, value) {
    if (kind === "text") {
      return String(value);
    }
    if (kind === "yuan") {
      return formatFen(value, false);
    }
    if (kind === "yuan-rate") {
      return fenToYuanText(value);
    }
    return String(value);
  }

  function toJSON(payload) {
    var text = JSON.stringify(payload, function (key, value) {
      return value instanceof Raw ? "@@raw:" + value.digits + "@@" : value;
    });
    return text.replace(/"@@raw:(-?\d+)@@"/g, "$1");
  }

  // Integers of 16 digits or more do not survive JSON.parse; read them as strings (→ BigInt).
  function parseExact(text) {
    return JSON.parse(text.replace(/([:,[]\s*)(-?\d{16,})(?=\s*[,\]}])/g, '$1"$2"'));
  }

  /* ---------- Form ---------- */

  function getPath(object, path) {
    return path.split(".").reduce(function (node, key) {
      return node == null ? undefined : node[key];
    }, object);
  }

  function setPath(object, path, value) {
    var keys = path.split(".");
    var node = object;
    for (var i = 0; i < keys.length - 1; i++) {
      node = node[keys[i]] = node[keys[i]] || {};
    }
    node[keys[keys.length - 1]] = value;
  }

  function fieldOf(input) {
    return input.closest(".calc-field");
  }

  function setFieldError(input, messages) {
    var field = fieldOf(input);
    var box = field.querySelector(".field-error");
    var text = messages && messages.length ? messages.join(" ") : "";
    field.classList.toggle("has-error", !!text);
    box.textContent = text;
    box.hidden = !text;
    if (text) {
      input.setAttribute("aria-invalid", "true");
    } else {
      input.removeAttribute("aria-invalid");
    }
  }

  function clearErrors() {
    inputs.forEach(function (input) {
      setFieldError(input, null);
    });
    errorBox.hidden = true;
  }

  function showError(title, detail) {
    document.getElementById("calc-error-title").textContent = title;
    var detailBox = document.getElementById("calc-error-detail");
    detailBox.textContent = detail || "";
    detailBox.hidden = !detail;
    errorBox.hidden = false;
  }

  // Read every input. Values the page cannot read are flagged at once and left out of the
  // request, which still goes out so that the API can check everything else.
  function collect() {
    var payload = {};
    var unread = [];
    inputs.forEach(function (input) {
      var read = readInput(input);
      if (read.error) {
        unread.push(input.getAttribute("data-path"));
        setFieldError(input, [read.error]);
      } else if (!read.missing) {
        // A missing value is left out: the API names the field that is required.
        setPath(payload, input.getAttribute("data-path"), read.value);
      }
    });
    return { payload: payload, unread: unread };
  }

  function applyInput(data) {
    inputs.forEach(function (input) {
      var value = getPath(data, input.getAttribute("data-path"));
      input.value =
        value === undefined || value === null
          ? ""
          : showValue(input.getAttribute("data-kind"), value);
    });
    showOfferingPrice();
  }

  function findPreset(key) {
    for (var i = 0; i < presets.length; i++) {
      if (presets[i].key === key) {
        return presets[i];
      }
    }
    return null;
  }

  // The preset whose input is exactly what the form holds is shown as selected.
  function markPreset(payloadText) {
    presetButtons.forEach(function (button) {
      var preset = findPreset(button.getAttribute("data-preset"));
      var same = false;
      if (preset && payloadText) {
        same = canonical(preset.input) === payloadText;
      }
      button.setAttribute("aria-pressed", same ? "true" : "false");
    });
  }

  // A preset's input in the same spelling the form produces, to compare the two.
  function canonical(data) {
    var copy = {};
    inputs.forEach(function (input) {
      var kind = input.getAttribute("data-kind");
      var value = getPath(data, input.getAttribute("data-path"));
      if (value !== undefined && value !== null) {
        setPath(copy, input.getAttribute("data-path"), readText(kind, showValue(kind, value)).value);
      }
    });
    return toJSON(copy);
  }

  /* ---------- Results ---------- */

  function out(scope, name) {
    return scope.querySelector('[data-out="' + name + '"]');
  }

  function cell(tag, className, text) {
    var element = document.createElement(tag);
    if (className) {
      element.className = className;
    }
    if (text !== undefined) {
      element.textContent = text;
    }
    return element;
  }

  function renderLines(body, lines) {
    body.textContent = "";
    lines.forEach(function (line, index) {
      var row = document.createElement("tr");
      var last = index === lines.length - 1;
      if (last) {
        row.className = "calc-line-total";
      }
      var item = cell("td", "calc-line-item");
      item.appendChild(cell("div", "calc-line-label", line.label));
      item.appendChild(cell("div", "calc-line-formula", line.formula));
      row.appendChild(item);
      row.appendChild(cell("td", "num calc-line-amount", formatFen(line.amount_fen)));
      body.appendChild(row);
    });
  }

  function fieldText(path) {
    return form.querySelector('[data-path="' + path + '"]').value.trim();
  }

  function render(data) {
    var totals = {};
    OPTIONS.forEach(function (key) {
      totals[key] = toBig(data[key].job_fen);
    });
    var cheapest = OPTIONS.reduce(function (best, key) {
      return totals[key] < best ? totals[key] : best;
    }, totals.buy);
    var winners = OPTIONS.filter(function (key) {
      return totals[key] === cheapest;
    });

    OPTIONS.forEach(function (key) {
      var option = data[key];
      var card = root.querySelector('.calc-result[data-option="' + key + '"]');
      var isCheapest = winners.indexOf(key) !== -1;
      card.classList.toggle("is-cheapest", isCheapest);
      card.querySelector(".calc-cheapest-badge").hidden = !isCheapest;
      out(card, "job").textContent = formatFen(option.job_fen);
      out(card, "per_month").textContent = formatFen(option.per_month_fen);
      var lifetime = out(card, "lifetime");
      if (lifetime) {
        lifetime.textContent =
          option.lifetime_fen === undefined ? "—" : formatFen(option.lifetime_fen);
      }
      renderLines(out(card, "lines"), option.lines || []);
    });

    var names = winners.map(function (key) {
      return t.options[key];
    });
    var summary = root.querySelector(".calc-summary");
    out(summary, "cheapest-name").textContent = names.reduce(function (all, name) {
      return fill(t.cheapest_tie, { first: all, second: name });
    });
    out(summary, "cheapest-amount").textContent = formatFen(cheapest);

    Array.prototype.forEach.call(root.querySelectorAll("[data-against]"), function (tile) {
      var other = totals[tile.getAttribute("data-against")];
      var diff = other - totals.starverse;
      var magnitude = diff < ZERO ? -diff : diff;
      var value = out(tile, "saving-value");
      var note = out(tile, "saving-note");
      tile.classList.toggle("is-saving", diff > ZERO);
      tile.classList.toggle("is-costlier", diff < ZERO);
      if (diff === ZERO) {
        value.textContent = t.same_cost;
        note.textContent = "\u00a0";
        return;
      }
      value.textContent = fill(diff > ZERO ? t.saves : t.costs_more, {
        amount: formatFen(magnitude),
      });
      note.textContent =
        other > ZERO
          ? fill(diff > ZERO ? t.less_percent : t.more_percent, {
              percent: percent(magnitude, other),
            })
          : "\u00a0";
    });

    // What the verdict compares: the purchase spread over its lifetime, against the rentals
    verdict.textContent = fill(t.verdict, {
      days: fieldText("duration_days"),
      years: fieldText("buy.years"),
    });

    var hint = out(form, "hint");
    if (hint && data.months !== undefined) {
      hint.textContent = fill(t.months, { months: String(data.months).replace(/\.?0+$/, "") });
    }
  }

  /* ---------- Requests ---------- */

  var timer = null;
  var sequence = 0;
  var controller = null;

  function setBusy(busy) {
    results.setAttribute("aria-busy", busy ? "true" : "false");
    statusBox.textContent = busy ? t.calculating : "";
  }

  function setStale(stale) {
    results.classList.toggle("is-stale", stale);
  }

  function calculate() {
    window.clearTimeout(timer);
    clearErrors();
    var collected = collect();
    var unread = collected.unread;
    var body = toJSON(collected.payload);
    markPreset(unread.length ? null : body);
    if (unread.length) {
      setStale(true);
      showError(t.fix_fields);
    }
    if (controller) {
      controller.abort();
    }
    controller = "AbortController" in window ? new AbortController() : null;
    var mine = ++sequence;
    setBusy(true);
    fetch(root.getAttribute("data-api"), {
      method: "POST",
      headers: {
        "Content-Type": "application/json",
        Accept: "application/json",
        "Accept-Language": root.getAttribute("data-lang") || document.documentElement.lang,
      },
      body: body,
      credentials: "same-origin",
      signal: controller ? controller.signal : undefined,
    })
      .then(function (response) {
        return response.text().then(function (text) {
          var data = null;
          try {
            data = parseExact(text);
          } catch (error) {
            data = null;
          }
          return { status: response.status, ok: response.ok, data: data };
        });
      })
      .then(function (answer) {
        if (mine !== sequence) {
          return;
        }
        setBusy(false);
        if (answer.ok && answer.data && answer.data.buy && !unread.length) {
          render(answer.data);
          setStale(false);
          return;
        }
        setStale(true);
        var data = answer.data || {};
        if (answer.status === 400 && data.errors) {
          // The API's word on every field, except those the page could not read (and so
          // left out): for them the page's own message stands.
          var rest = [];
          Object.keys(data.errors).forEach(function (path) {
            if (unread.indexOf(path) !== -1) {
              return;
            }
            var input = form.querySelector('[data-path="' + path + '"]');
            if (input) {
              setFieldError(input, data.errors[path]);
            }
            data.errors[path].forEach(function (message) {
              rest.push(path && path !== "non_field_errors" ? path + ": " + message : message);
            });
          });
          if (unread.length) {
            showError(t.fix_fields, rest.join("; "));
          } else {
            showError(t.rejected, data.detail || rest.join("; "));
          }
        } else if (!unread.length) {
          showError(t.failed, data.detail);
        }
      })
      .catch(function (error) {
        if (mine !== sequence || (error && error.name === "AbortError")) {
          return;
        }
        setBusy(false);
        setStale(true);
        if (!unread.length) {
          showError(t.failed);
        }
      });
  }

  function schedule() {
    window.clearTimeout(timer);
    timer = window.setTimeout(calculate, DEBOUNCE_MS);
  }

  function choosePreset(key, updateUrl) {
    var preset = findPreset(key) || presets[0];
    if (!preset) {
      return;
    }
    applyInput(preset.input);
    if (updateUrl && window.history && window.history.replaceState) {
      window.history.replaceState(null, "", window.location.pathname + "#" + preset.key);
    }
    calculate();
  }

  form.addEventListener("input", function (event) {
    if (event.target.matches("[data-path]")) {
      schedule();
    }
  });

  // The chosen offering's prices, under its name
  var offering = document.getElementById("calc-starverse-offering");
  var offeringPrice = document.getElementById("calc-starverse-price");

  function showOfferingPrice() {
    var chosen = offering.options[offering.selectedIndex];
    offeringPrice.textContent = chosen ? chosen.getAttribute("data-price") : "";
  }

  form.addEventListener("change", function (event) {
    if (event.target.matches("select[data-path]")) {
      showOfferingPrice();
      schedule();
    }
  });

  // Money fields are tidied to "280,000.00" when left, if they hold a valid amount.
  form.addEventListener(
    "blur",
    function (event) {
      var input = event.target;
      if (!input.matches || !input.matches("input.calc-money")) {
        return;
      }
      var read = readInput(input);
      if (read.value !== undefined && !read.error) {
        var raw = read.value instanceof Raw ? read.value.digits : read.value;
        input.value = showValue(input.getAttribute("data-kind"), raw);
      }
    },
    true
  );

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    calculate();
  });

  presetButtons.forEach(function (button) {
    button.addEventListener("click", function () {
      choosePreset(button.getAttribute("data-preset"), true);
    });
  });

  window.addEventListener("hashchange", function () {
    var key = window.location.hash.slice(1);
    if (findPreset(key)) {
      choosePreset(key, false);
    }
  });

  // Start: the preset in the hash (or the first), then any ?name=value from the query string.
  var start = findPreset(window.location.hash.slice(1)) || presets[0];
  if (start) {
    applyInput(start.input);
  }
  if (window.URLSearchParams && window.location.search) {
    var params = new URLSearchParams(window.location.search);
    inputs.forEach(function (input) {
      var name = input.getAttribute("name");
      if (params.has(name)) {
        input.value = params.get(name);
      }
    });
  }
  calculate();
})();
