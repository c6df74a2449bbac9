// The status bar entry: "GPU: MIG 1g.10gb, 10 GiB, isolated · 4.2 of 5 GPU-h left", refreshed
// every minute (the answer's refresh_s) from the server extension (GET <base_url>gpulab/me); a
// click on it opens the gpulab page.
// While the culler's GPU-idle warning for this server stands, the entry shows it with two
// buttons: Keep (POST gpulab/keep: the stop moves one window later, one of the day's keeps) and
// Move to CPU (saves every open document, then POST gpulab/move-to-cpu: the server restarts on
// a CPU profile with the same home; the page goes to the hub's home while it does).
import { PageConfig, URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { IStatusBar } from '@jupyterlab/statusbar';
import { Widget } from '@lumino/widgets';


async function call(settings, path, method) {
  const url = URLExt.join(settings.baseUrl, 'gpulab', path);
  const response = await ServerConnection.makeRequest(url, { method }, settings);
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
