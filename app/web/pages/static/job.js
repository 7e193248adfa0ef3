// A live job page: the server's events (GET /jobs/<id>/events) say what changed, and the
// page fetches itself again and swaps in its sections. When the stream drops, it polls.
// No framework, no inline script (the Content-Security-Policy allows this file only).
"use strict";
(function () {
  const root = document.getElementById("job");
  if (!root || root.dataset.live !== "yes") {
    return;
  }
  const SECTIONS = [
    "#job-state", "#facts", "#links", "#cancel", "#steps", "#commands", "#checks",
    "#agent", "#egress", "#diff", "#audit", "#load",
  ];
  const POLL_MS = 5000;
  let busy = false;
  let again = false;
  let poller = null;
  let source = null;
  let done = false;

  function stop() {
    done = true;
    if (source) {
      source.close();
    }
    if (poller) {
      clearInterval(poller);
    }
  }

  function openDetails() {
    return new Set(
      Array.from(document.querySelectorAll("#steps details[open]"), (d) =>
        d.closest("li.step")?.querySelector(".step-name")?.textContent
      )
    );
  }

  async function refresh() {
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    try {
      const answer = await fetch(location.pathname, { credentials: "same-origin" });
      if (!answer.ok) {
        return;
      }
      const kept = openDetails();
      const next = new DOMParser().parseFromString(await answer.text(), "text/html");
      // Each section with the id of the element before it in the fresh page, taken before
      // any is moved: a section the page did not have (Cancel once a queued job runs) goes
      // in after that element.
      const swaps = SECTIONS.map((selector) => {
        const fresh = next.querySelector(selector);
        return [document.querySelector(selector), fresh, fresh?.previousElementSibling?.id];
      });
      for (const [now, fresh, after] of swaps) {
        if (now && fresh) {
          now.replaceWith(document.adoptNode(fresh));
        } else if (now) {
          now.remove();
        } else if (fresh && after && document.getElementById(after)) {
          document.getElementById(after).after(document.adoptNode(fresh));
        }
      }
      document.querySelectorAll("#steps li.step").forEach((step) => {
        const name = step.querySelector(".step-name")?.textContent;
        const details = step.querySelector("details");
        if (details && kept.has(name)) {
          details.open = true;
        }
      });
      const nextRoot = next.getElementById("job");
      if (nextRoot && nextRoot.dataset.live !== "yes") {
        root.dataset.live = "no";
        stop();
      }
    } catch (error) {
      // the next event or poll tries again
    } finally {
      busy = false;
      if (again && !done) {
        again = false;
        refresh();
      }
    }
  }

  function poll() {
    if (!poller && !done) {
      poller = setInterval(refresh, POLL_MS);
    }
  }

  if (!("EventSource" in window)) {
    poll();
    return;
  }
  source = new EventSource(location.pathname.replace(/\/$/, "") + "/events");
  source.addEventListener("open", () => {
    if (poller) {
      clearInterval(poller);
      poller = null;
    }
  });
  for (const name of ["steps", "output", "state"]) {
    source.addEventListener(name, refresh);
  }
  source.addEventListener("error", () => {
    if (!done) {
      poll(); // until the stream is back (EventSource reconnects by itself)
    }
  });
})();
