"""A combo box and a push button whose text ends in "…" where the side panel is narrower than it.

Qt sizes both to their text: a TotalSegmentator model's longest configuration ("Configuration: automatic
(by the series' spacing and this computer's speed)") and a structure subset naming its first three made the
Segment panel 90 px wider than its dock, which has no horizontal scroll bar, so the panel's right edge
was cut. These keep a small least width, draw the text elided, and keep the whole text in ``text()`` /
``currentText()`` and in the tooltip.
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import (
    QComboBox,
    QPushButton,
    QSizePolicy,
    QStyle,
    QStyleOptionButton,
    QStyleOptionComboBox,
    QStylePainter,
    QWidget,
)

LEAST_CHARACTERS = 16  # the fewest characters shown before "…"
_WHOLE_TEXT_ROLE = Qt.ItemDataRole.UserRole + 52  # the item's tooltip is its text, set here (kept up to date)


class ElidedComboBox(QComboBox):
    """As wide as the panel lets it be, not as its longest item; each item's tooltip has its whole text, the
    box's tooltip the current one's and then ``setToolTip``'s own text."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._about = ""
        self.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.setMinimumContentsLength(LEAST_CHARACTERS)
        self.currentIndexChanged.connect(self._whole_texts)
        self.model().rowsInserted.connect(self._whole_texts)
        self.model().dataChanged.connect(self._whole_texts)

    def setToolTip(self, text: str) -> None:  # noqa: N802
        self._about = text
        self._whole_texts()

    def set_item_tip(self, index: int, tip: str) -> None:
        """An item's own tooltip (kept: not replaced by its whole text)."""
        self.setItemData(index, False, _WHOLE_TEXT_ROLE)
        self.setItemData(index, tip, Qt.ItemDataRole.ToolTipRole)

    def _whole_texts(self, *_args) -> None:
        for index in range(self.count()):  # an item's own tooltip (a model's version) is kept
            tip = self.itemData(index, Qt.ItemDataRole.ToolTipRole)
            if tip in (None, "") or self.itemData(index, _WHOLE_TEXT_ROLE):
                if tip != self.itemText(index):
                    self.setItemData(index, self.itemText(index), Qt.ItemDataRole.ToolTipRole)
                    self.setItemData(index, True, _WHOLE_TEXT_ROLE)
        current = self.currentText()
        super().setToolTip(f"{current}\n\n{self._about}" if current and self._about else current or self._about)

    def paintEvent(self, _event) -> None:  # noqa: N802
        painter = QStylePainter(self)
        option = QStyleOptionComboBox()
        self.initStyleOption(option)
        painter.drawComplexControl(QStyle.ComplexControl.CC_ComboBox, option)
        field = self.style().subControlRect(QStyle.ComplexControl.CC_ComboBox, option,
                                            QStyle.SubControl.SC_ComboBoxEditField, self)
        room = field.width() - (option.iconSize.width() + 4 if not option.currentIcon.isNull() else 0) - 4
        option.currentText = self.fontMetrics().elidedText(option.currentText, Qt.TextElideMode.ElideRight,
                                                           max(room, 0))
        painter.drawControl(QStyle.ControlElement.CE_ComboBoxLabel, option)


class ElidedButton(QPushButton):
    """A push button that never widens its panel: its text is elided to its width (``text()`` stays whole),
    its tooltip is the whole text and then ``about``."""

    def __init__(self, about: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._about = about
        self.setToolTip(about)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)

    def setText(self, text: str) -> None:  # noqa: N802
        super().setText(text)
        self.setToolTip(f"{text}\n\n{self._about}" if text else self._about)

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        hint = super().minimumSizeHint()
        return QSize(min(hint.width(), self.fontMetrics().averageCharWidth() * LEAST_CHARACTERS), hint.height())

    def elided_text(self) -> str:
        """What the button shows now."""
        option = QStyleOptionButton()
        self.initStyleOption(option)
        room = self.style().subElementRect(QStyle.SubElement.SE_PushButtonContents, option, self).width() - 8
        return self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, max(room, 0))

    def paintEvent(self, _event) -> None:  # noqa: N802
        painter = QStylePainter(self)
        option = QStyleOptionButton()
        self.initStyleOption(option)
        option.text = self.elided_text()
        painter.drawControl(QStyle.ControlElement.CE_PushButton, option)
