/* Starverse console, an instance's Terminal tab: xterm.js (static/vendor/xterm) connected to the
   web terminal service over a WebSocket. Keystrokes go out as UTF-8 bytes (Chinese input from
   an IME included), the shell's output comes back as bytes; the fit addon keeps the terminal
   the size of its box and tells the shell each new size. Copy and paste go through xterm's
   selection and the clipboard. A connection that breaks is tried again with growing pauses;
   one the service closed for a reason (not running, idle, exited, not signed in) waits for
   the Reconnect button. */
(function () {
  "use strict";

  var page = document.getElementById("terminal-page");
  var screen = document.getElementById("terminal");
  if (!page || !screen || !window.Terminal || !window.FitAddon) {
    return;
  }
  var text = {};
  try {
    text = JSON.parse(document.getElementById("terminal-i18n").textContent);
  } catch (error) {
    text = {};
  }
  var statusLine = document.getElementById("terminal-status");
  var reconnectButton = document.getElementById("terminal-reconnect");
  var encoder = new TextEncoder();
  // Closed by the service for a reason it has told the user: no automatic retry.
  var FINAL = { 1000: true, 4401: true, 4404: true, 4408: true, 4409: true };
  var RETRY_DELAYS = [1, 2, 4, 8, 15, 30];

  var term = new window.Terminal({
    cursorBlink: true,
    fontSize: 14,
    fontFamily:
      'ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", ' +
      '"Noto Sans Mono CJK SC", "WenQuanYi Micro Hei Mono", "WenQuanYi Micro Hei", monospace',
    scrollback: 5000,
    theme: { background: "#0e1320", foreground: "#e6e9f0", cursor: "#a99cff" },
  });
  var fit = new window.FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(screen);
  fit.fit();

  var socket = null;
  var attempt = 0;
  var retryTimer = null;

  function say(message, isError) {
    statusLine.textContent = message;
    statusLine.classList.toggle("is-error", Boolean(isError));
  }

  function isOpen() {
    return socket !== null && socket.readyState === WebSocket.OPEN;
  }

  function sendResize() {
    if (isOpen()) {
      socket.send(JSON.stringify({ type: "resize", cols: term.cols, rows: term.rows }));
    }
  }

  function notice(message) {
    var colour = message.level === "error" ? "\x1b[1;31m" : "\x1b[1;36m";
    term.write("\r\n" + colour + message.text + "\x1b[0m\r\n");
    say(message.text, message.level === "error");
  }

  function onMessage(event) {
    if (typeof event.data !== "string") {
      term.write(new Uint8Array(event.data));
      return;
    }
    var message;
    try {
      message = JSON.parse(event.data);
    } catch (error) {
      return;
    }
    if (message.type === "ready") {
      attempt = 0;
      say(text.connected || "");
      sendResize();
      term.focus();
    } else if (message.type === "notice") {
      notice(message);
    }
  }

  function onClose(event) {
    socket = null;
    reconnectButton.hidden = false;
    if (FINAL[event.code]) {
      return; // the notice already says why
    }
    if (attempt >= RETRY_DELAYS.length) {
      say(text.closed || "", true);
      return;
    }
    var delay = RETRY_DELAYS[attempt];
    attempt += 1;
    say(String(text.lost || "").replace("{seconds}", String(delay)), true);
    retryTimer = window.setTimeout(connect, delay * 1000);
  }

  function connect() {
    window.clearTimeout(retryTimer);
    if (socket !== null) {
      return;
    }
    reconnectButton.hidden = true;
    say(text.connecting || "");
    socket = new WebSocket(page.getAttribute("data-url"));
    socket.binaryType = "arraybuffer";
    socket.addEventListener("message", onMessage);
    socket.addEventListener("close", onClose);
  }

  function send(data) {
    if (isOpen()) {
      socket.send(encoder.encode(data));
    }
  }

  term.onData(send);
  term.onBinary(function (data) {
    // mouse reports in the X10 encoding: one byte per character
    if (isOpen()) {
      var bytes = new Uint8Array(data.length);
      for (var i = 0; i < data.length; i += 1) {
        bytes[i] = data.charCodeAt(i) & 0xff;
      }
      socket.send(bytes);
    }
  });
  term.onResize(sendResize);

  function copySelection() {
    var selected = term.getSelection();
    if (!selected) {
      say(text.nothing_selected || "");
      return;
    }
    if (!navigator.clipboard || !window.isSecureContext) {
      say(text.copy_blocked || "", true);
      return;
    }
    navigator.clipboard.writeText(selected).then(
      function () {
        say(text.copied || "");
      },
      function () {
        say(text.copy_blocked || "", true);
      }
    );
  }

  function pasteClipboard() {
    if (!navigator.clipboard || !navigator.clipboard.readText || !window.isSecureContext) {
      say(text.paste_blocked || "", true);
      return;
    }
    navigator.clipboard.readText().then(
      function (clip) {
        term.paste(clip);
        term.focus();
      },
      function () {
        say(text.paste_blocked || "", true);
      }
    );
  }

  // Ctrl+Shift+C copies, as do Ctrl+C and ⌘C while text is selected (without a selection
  // Ctrl+C stays the interrupt). Ctrl+Shift+V is left to the browser, whose paste event xterm
  // turns into input, as it does for ⌘V and the context menu's Paste.
  term.attachCustomKeyEventHandler(function (event) {
    if (event.type !== "keydown") {
      return true;
    }
    var key = event.key.toLowerCase();
    var copyKey = (event.ctrlKey || event.metaKey) && key === "c";
    if (copyKey && (event.shiftKey || term.hasSelection())) {
      copySelection();
      term.clearSelection();
      event.preventDefault();
      return false;
    }
    if (event.ctrlKey && event.shiftKey && key === "v") {
      return false;
    }
    return true;
  });

  document.getElementById("terminal-copy").addEventListener("click", copySelection);
  document.getElementById("terminal-paste").addEventListener("click", pasteClipboard);
  reconnectButton.addEventListener("click", function () {
    attempt = 0;
    term.write("\r\n");
    connect();
  });

  var pending = null;
  function refit() {
    window.cancelAnimationFrame(pending);
    pending = window.requestAnimationFrame(function () {
      fit.fit();
    });
  }
  if (window.ResizeObserver) {
    new ResizeObserver(refit).observe(screen);
  } else {
    window.addEventListener("resize", refit);
  }

  connect();
})();
