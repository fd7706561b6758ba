/* Starverse console: language select submits on change, copy buttons, confirm before
   destructive POSTs, and the active menu item scrolled into view on narrow screens. */
(function () {
  "use strict";

  document.addEventListener("change", function (event) {
    var target = event.target;
    if (target.matches && target.matches("select[data-autosubmit]") && target.form) {
      target.form.submit();
    }
  });

  document.addEventListener("submit", function (event) {
    var form = event.target;
    var message = form.getAttribute && form.getAttribute("data-confirm");
    if (message && !window.confirm(message)) {
      event.preventDefault();
    }
  });

  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text);
    }
    return new Promise(function (resolve, reject) {
      var area = document.createElement("textarea");
      area.value = text;
      area.setAttribute("readonly", "");
      area.style.position = "fixed";
      area.style.top = "0";
      area.style.opacity = "0";
      document.body.appendChild(area);
      area.select();
      try {
        if (document.execCommand("copy")) {
          resolve();
        } else {
          reject(new Error("copy refused"));
        }
      } catch (error) {
        reject(error);
      } finally {
        document.body.removeChild(area);
      }
    });
  }

  function selectContents(element) {
    var range = document.createRange();
    range.selectNodeContents(element);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("[data-copy]");
    if (!button) {
      return;
    }
    var source = document.querySelector(button.getAttribute("data-copy"));
    if (!source) {
      return;
    }
    var label = button.querySelector("span");
    copyText(source.textContent.trim()).then(
      function () {
        if (!label) {
          return;
        }
        var original = label.textContent;
        label.textContent = button.getAttribute("data-copied-label") || original;
        button.classList.add("is-copied");
        window.setTimeout(function () {
          label.textContent = original;
          button.classList.remove("is-copied");
        }, 2000);
      },
      function () {
        selectContents(source);
      }
    );
  });

  // Preset chips fill an input: <button data-fill="#id_amount" data-value="500">.
  document.addEventListener("click", function (event) {
    var chip = event.target.closest && event.target.closest("[data-fill]");
    if (!chip) {
      return;
    }
    var input = document.querySelector(chip.getAttribute("data-fill"));
    if (!input) {
      return;
    }
    input.value = chip.getAttribute("data-value");
    var group = chip.parentNode.querySelectorAll("[data-fill]");
    for (var i = 0; i < group.length; i++) {
      group[i].classList.toggle("is-selected", group[i] === chip);
    }
    input.focus();
  });

  document.addEventListener("DOMContentLoaded", function () {
    var nav = document.querySelector(".sidenav");
    var active = nav && nav.querySelector(".nav-link.is-active");
    if (active && nav.scrollWidth > nav.clientWidth) {
      nav.scrollLeft = active.offsetLeft - (nav.clientWidth - active.offsetWidth) / 2;
    }
  });
})();

// Attach forms (Disks page): the chosen instance decides where the form posts.
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("[data-attach-form]").forEach(function (form) {
    var select = form.querySelector("[data-attach-target]");
    function sync() { form.action = select.value; }
    select.addEventListener("change", sync);
    sync();
  });
});
