#include "report/pipeline_svg.hpp"

#include <algorithm>
#include <map>
#include <sstream>
#include <vector>

namespace dflow::report {

std::string escape_html(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

constexpr int kNodeW = 210, kNodeH = 66, kGapX = 56, kRowH = 112, kTop = 24, kLeft = 200;
constexpr int kLabelW = 245;  // the widest edge annotation ("mean 12.3 / 16 · full 100% · empty 100%") at 11px

// What the drawing covers horizontally, so that the viewBox fits it.
struct Extent {
  int lo = 1 << 30, hi = -(1 << 30);
  void add(int a, int b) { lo = std::min(lo, std::min(a, b)), hi = std::max(hi, std::max(a, b)); }
};

struct Box {
  int x = 0, y = 0;  // top-left
  int layer = 0;
  int cx() const { return x + kNodeW / 2; }
};

// Rows by longest path over the forward (non-token) edges: data flows down.
std::vector<Box> layout(const PipelineModel& p, int& height) {
  const size_t n = p.nodes.size();
  std::vector<Box> boxes(n);
  for (size_t pass = 0; pass < n; ++pass) {  // at most n passes even if a non-token cycle slipped through
    bool changed = false;
    for (const auto& e : p.edges) {
      const int from = p.node_index(e.from), to = p.node_index(e.to);
      if (e.token || from < 0 || to < 0 || from == to) continue;
      if (boxes[to].layer < boxes[from].layer + 1) boxes[to].layer = boxes[from].layer + 1, changed = true;
    }
    if (!changed) break;
  }
  std::map<int, std::vector<size_t>> rows;
  for (size_t i = 0; i < n; ++i) rows[boxes[i].layer].push_back(i);
  int widest = kNodeW;
  for (const auto& [layer, members] : rows) widest = std::max(widest, static_cast<int>(members.size()) * (kNodeW + kGapX) - kGapX);
  int row_index = 0;
  for (auto& [layer, members] : rows) {
    const int row_w = static_cast<int>(members.size()) * (kNodeW + kGapX) - kGapX;
    for (size_t k = 0; k < members.size(); ++k) {
      boxes[members[k]].x = kLeft + (widest - row_w) / 2 + static_cast<int>(k) * (kNodeW + kGapX);
      boxes[members[k]].y = kTop + row_index * kRowH;
      boxes[members[k]].layer = row_index;  // compact: rows without gaps
    }
    ++row_index;
  }
  height = kTop + row_index * kRowH - (kRowH - kNodeH) + 24;
  return boxes;
}

void draw_node(std::ostringstream& out, const PipelineNode& node, const Box& b) {
  out << "<g class=\"node\" data-node=\"" << escape_html(node.name) << "\" transform=\"translate(" << b.x << "," << b.y << ")\">";
  for (int shadow = std::min(node.replicas, 3) - 1; shadow > 0; --shadow)  // a replicated node is a stack
    out << "<rect class=\"box replica\" x=\"" << 5 * shadow << "\" y=\"" << -5 * shadow << "\" width=\"" << kNodeW
        << "\" height=\"" << kNodeH << "\" rx=\"7\"/>";
  out << "<rect class=\"box\" width=\"" << kNodeW << "\" height=\"" << kNodeH << "\" rx=\"7\"/>"
      << "<text class=\"name\" x=\"10\" y=\"18\">" << escape_html(node.name) << "</text>";
  std::string type = node.type + (node.replicas > 1 ? " \u00d7" + std::to_string(node.replicas) : "");
  out << "<text class=\"type\" x=\"10\" y=\"33\">" << escape_html(type) << "</text>"
      << "<rect class=\"busy-bg\" x=\"10\" y=\"52\" width=\"" << kNodeW - 20 << "\" height=\"7\" rx=\"2\"/>"
      << "<rect class=\"busy-bar\" x=\"10\" y=\"52\" width=\"0\" height=\"7\" rx=\"2\" data-full=\"" << kNodeW - 20 << "\"/>"
      << "<text class=\"busy-text\" x=\"10\" y=\"47\"></text></g>\n";
}

std::string port_label(const PipelineEdge& e) {
  const bool plain = (e.from_port == "out" || e.from_port.empty()) && (e.to_port == "in" || e.to_port.empty());
  if (e.token && e.from_port == "token" && e.to_port == "token") return "";
  return plain ? std::string() : e.from_port + " \u2192 " + e.to_port;
}

void draw_edge_label(std::ostringstream& out, const PipelineEdge& e, int x, int y, bool left, Extent& extent) {
  const char* anchor = left ? "end" : "start";
  const int bar_x = left ? -90 : 0;
  std::string head = port_label(e);
  head += (head.empty() ? "" : " \u00b7 ") + std::string(e.token ? "token " : "") + "cap " + std::to_string(e.capacity);
  if (e.routed) head += " per replica";
  const int width = std::max(e.token ? kLabelW / 2 + 20 : kLabelW, static_cast<int>(head.size()) * 6);
  extent.add(x, left ? x - width : x + width);
  out << "<g class=\"label\" transform=\"translate(" << x << "," << y << ")\">"
      << "<text class=\"edge-head\" text-anchor=\"" << anchor << "\" y=\"-14\">" << escape_html(head) << "</text>"
      << "<text class=\"edge-occ\" text-anchor=\"" << anchor << "\" y=\"0\"></text>"
      << "<rect class=\"occ-bg\" x=\"" << bar_x << "\" y=\"5\" width=\"90\" height=\"5\" rx=\"2\"/>"
      << "<rect class=\"occ-bar\" x=\"" << bar_x << "\" y=\"5\" width=\"0\" height=\"5\" rx=\"2\" data-full=\"90\"/></g>";
}

void draw_edge(std::ostringstream& out, const PipelineEdge& e, const Box& from, const Box& to, int back_lane, int lane_x,
               Extent& extent) {
  out << "<g class=\"edge\" data-edge=\"" << escape_html(e.name) << "\" data-token=\"" << (e.token ? 1 : 0) << "\">";
  if (back_lane < 0) {  // forward: bottom of producer to top of consumer
    const int x1 = from.cx(), y1 = from.y + kNodeH, x2 = to.cx(), y2 = to.y;
    const int dy = (y2 - y1) / 2;
    out << "<path class=\"wire\" d=\"M" << x1 << "," << y1 << " C" << x1 << "," << y1 + dy << " " << x2 << "," << y2 - dy << " "
        << x2 << "," << y2 - 3 << "\" marker-end=\"url(#arrow)\"/>";
    const bool left = x2 < x1;
    draw_edge_label(out, e, (x1 + x2) / 2 + (left ? -10 : 10), (y1 + y2) / 2 + 4, left, extent);
  } else {  // back edge (token cycle): out of the producer's left side, up a lane, into the consumer's left side
    const int x1 = from.x, y1 = from.y + kNodeH / 2 + 6, x2 = to.x, y2 = to.y + kNodeH / 2 + 6 + 8 * (back_lane % 2);
    out << "<path class=\"wire\" d=\"M" << x1 << "," << y1 << " H" << lane_x + 8 << " Q" << lane_x << "," << y1 << " " << lane_x
        << "," << y1 - 8 << " V" << y2 + 8 << " Q" << lane_x << "," << y2 << " " << lane_x + 8 << "," << y2 << " H" << x2 - 3
        << "\" marker-end=\"url(#arrow)\"/>";
    extent.add(lane_x - 4, x1);
    draw_edge_label(out, e, x1 - 8, y1 - 10, true, extent);  // by its producer: labels of two lanes never meet
  }
  out << "</g>\n";
}

}  // namespace

std::string pipeline_svg(const PipelineModel& p) {
  int height = 0;
  const std::vector<Box> boxes = layout(p, height);
  Extent extent;
  std::ostringstream drawing;
  int back_lane = 0;
  for (const auto& e : p.edges) {
    const int from = p.node_index(e.from), to = p.node_index(e.to);
    if (from < 0 || to < 0) continue;
    const bool back = e.token || boxes[to].layer <= boxes[from].layer;
    if (!back) {
      draw_edge(drawing, e, boxes[from], boxes[to], -1, 0, extent);
      continue;
    }
    int lane_x = std::min(boxes[from].x, boxes[to].x);
    for (const auto& b : boxes)  // left of every node on the rows it passes
      if (b.layer >= std::min(boxes[from].layer, boxes[to].layer) && b.layer <= std::max(boxes[from].layer, boxes[to].layer))
        lane_x = std::min(lane_x, b.x);
    draw_edge(drawing, e, boxes[from], boxes[to], back_lane, lane_x - 22 - 30 * back_lane, extent);
    ++back_lane;
  }
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    draw_node(drawing, p.nodes[i], boxes[i]);
    extent.add(boxes[i].x, boxes[i].x + kNodeW + 10);  // + the stack of a replicated node
  }
  if (p.nodes.empty()) extent.add(0, 300);
  const int x0 = extent.lo - 10, width = extent.hi - extent.lo + 20;
  std::ostringstream out;
  out << "<svg class=\"pipeline\" viewBox=\"" << x0 << " 0 " << width << " " << height << "\" width=\"" << width << "\" height=\""
      << height << "\" role=\"img\" aria-label=\"the declared pipeline\">\n"
      << "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" "
         "orient=\"auto-start-reverse\"><path d=\"M0,0 L10,5 L0,10 z\"/></marker></defs>\n"
      << drawing.str() << "</svg>\n";
  return out.str();
}

}  // namespace dflow::report
