// The status bar entry: "GPU: MIG 1g.10gb, 10 GiB, isolated · 4.2 of 5 GPU-h left", refreshed
// every minute (the answer's refresh_s) from the server extension (GET <base_url>gpulab/me); a
// click on it opens the gpulab page.
// While the culler's GPU-idle warning for this server stands, the entry shows it with two
// buttons: Keep (POST gpulab/keep: the stop moves one window later, one of the day's keeps) and
// Move to CPU (saves every open document, then POST gpulab/move-to-cpu: the server restarts on
// a CPU profile with the same home; the page goes to the hub's home while it does).
// It also notes real interaction in the page (a keystroke, a click, a scroll on the document;
// not an open tab, not a running kernel) and, at most once a minute and only when there was
// some since its last report, tells the server extension how long ago the latest was (POST
// gpulab/interaction {"idle_s"}): the culler's GPU-idle spare then knows who is at the keyboard.
import { PageConfig, URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { IStatusBar } from '@jupyterlab/statusbar';
import { Widget } from '@lumino/widgets';


// seconds between two interaction reports, at most
const REPORT_EVERY_S = 60;

async function call(settings, path, method, payload) {
  const url = URLExt.join(settings.baseUrl, 'gpulab', path);
  const init = payload === undefined ? { method } : { method, body: JSON.stringify(payload) };
  const response = await ServerConnection.makeRequest(url, init, settings);
  let body = {};
  try {
    body = await response.json();
  } catch (e) {
    body = {};
  }
  if (!response.ok) {
    throw new Error(body.message || response.statusText);
  }
  return body;
}

// "14:30" in the browser's time zone, for an ISO time
function clock(iso) {
  const at = new Date(iso);
  return isNaN(at) ? 'soon' : at.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
}

// Notes the latest keydown / pointerdown / wheel on the document (one timestamp, so a burst
// of keys costs nothing) and reports it every REPORT_EVERY_S when there was one since the
// last report. Only this: an open tab or a busy kernel sends nothing.
function reportInteraction(settings) {
  let last = null; // performance.now() of the latest interaction
  let reported = null; // the interaction last reported
  const note = () => {
    last = performance.now();
  };
  for (const type of ['keydown', 'pointerdown', 'wheel']) {
    document.addEventListener(type, note, { capture: true, passive: true });
  }
  const report = async () => {
    if (last !== null && last !== reported) {
      const at = last;
      try {
        await call(settings, 'interaction', 'POST', {
          idle_s: Math.max(0, (performance.now() - at) / 1000)
        });
        reported = at;
      } catch (e) {
        // the service is down or refused: the next minute tries again
      }
    }
  };
  window.setInterval(() => void report(), REPORT_EVERY_S * 1000);
}

function button(label, onClick) {
  const b = document.createElement('button');
  b.className = 'jp-gpulab-button';
  b.textContent = label;
  b.addEventListener('click', event => {
    event.stopPropagation();
    void onClick(b);
  });
  return b;
}

const plugin = {
  id: 'jupyterlab-gpulab:status',
  description: 'The GPU slice this server holds and the GPU-hours left; Keep or Move to CPU.',
  autoStart: true,
  optional: [IStatusBar],
  activate: (app, statusBar) => {
    reportInteraction(ServerConnection.makeSettings());
    if (!statusBar) {
      return;
    }
    const widget = new Widget();
    widget.addClass('jp-gpulab-status');
    widget.id = 'jupyterlab-gpulab-status';
    const text = document.createElement('span');
    text.textContent = 'GPU: …';
    const choices = document.createElement('span');
    widget.node.append(text, choices);
    let page = null;
    text.addEventListener('click', () => {
      if (page) {
        window.open(page, '_blank', 'noopener');
      }
    });
    statusBar.registerStatusItem(plugin.id, { item: widget, align: 'left', rank: 1000 });
    const settings = ServerConnection.makeSettings();
    let every = 60; // seconds between asks: the answer's refresh_s
    let shown = null; // the due time of the warning whose buttons are shown
    let moving = false;
    const say = message => {
      text.textContent = `GPU: ${message}`;
    };
    const keep = async b => {
      b.disabled = true;
      try {
        say((await call(settings, 'keep', 'POST')).message);
        choices.replaceChildren();
        shown = null;
      } catch (e) {
        say(e.message);
      }
    };
    const moveToCPU = async b => {
      b.disabled = true;
      try {
        // save every open document first: the server is stopped right after the answer
        await app.commands.execute('docmanager:save-all');
        say((await call(settings, 'move-to-cpu', 'POST')).message);
        moving = true; // this server stops now: nothing more to ask it
        choices.replaceChildren();
        const hub = PageConfig.getOption('hubPrefix') || '/hub/';
        window.setTimeout(() => window.location.assign(URLExt.join(hub, 'home')), 5000);
      } catch (e) {
        say(e.message);
        b.disabled = false;
      }
    };
    const refresh = async () => {
      if (moving) {
        return;
      }
      try {
        const me = await call(settings, 'me', 'GET');
        text.textContent = me.warning ? `⚠ GPU idle: stopped at ${clock(me.warning.due_at)}` : me.text;
        widget.node.title = me.title;
        widget.node.dataset.level = me.level;
        page = me.page;
        every = me.refresh_s || every;
        // the buttons stay while the same warning does (no flicker, no lost click)
        const key = me.warning ? me.warning.due_at : null;
        if (key !== shown) {
          shown = key;
          choices.replaceChildren(
            ...(key ? [button('Keep', keep), button('Move to CPU', moveToCPU)] : [])
          );
        }
      } catch (e) {
        text.textContent = 'GPU: unknown';
        widget.node.title = `gpulab: ${e.message}`;
      }
      window.setTimeout(refresh, every * 1000);
    };
    void refresh();
  }
};

export default plugin;
