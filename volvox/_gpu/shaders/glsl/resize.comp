#version 430
layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

struct _5
{
    uint _m0;
    uint _m1;
    uint _m2;
    uint _m3;
    uint _m4;
    uint _m5;
    uint _m6;
    uint _m7;
    float _m8;
    float _m9;
    float _m10;
    float _m11;
    float _m12;
    float _m13;
    float _m14;
    float _m15;
};

layout(binding = 0, std430) readonly buffer _9_8
{
    float _m0[];
} _8;

layout(binding = 1, std430) buffer _12_11
{
    float _m0[];
} _11;

layout(binding = 2, std430) readonly buffer _15_14
{
    _5 _m0;
} _14;

uint _91(uint _93, uint _94)
{
    return _93 % ((_94 == 0u) ? 1u : _94);
}

uint _99(uint _100, uint _101)
{
    return _100 / ((_101 == 0u) ? 1u : _101);
}

float _23(uint _18, float _19, float _20, float _21, float _22)
{
    return (((float(_18) + _19) * _20) / _21) - _22;
}

uint _34(float _32, uint _33)
{
    float _46 = 0.0;
    float _50 = floor(_32);
    bool _55 = abs((_32 - _50) - 0.5) <= 9.9999999747524270787835121154785e-07;
    _46 = floor(_32 + 0.5);
    if ((_14._m0._m7 == 0u) && _55)
    {
        _46 = _50;
    }
    if ((_14._m0._m7 == 1u) && _55)
    {
        _46 = _50 + 1.0;
    }
    if (_14._m0._m7 == 2u)
    {
        _46 = _50;
    }
    if (_14._m0._m7 == 3u)
    {
        _46 = ceil(_32);
    }
    return uint(clamp(clamp(_46, 0.0, float(_33 - 1u)), 0.0, 4294967040.0));
}

void main()
{
    uint _129 = (((gl_WorkGroupID.y * gl_NumWorkGroups.x) + gl_WorkGroupID.x) * 64u) + gl_LocalInvocationIndex;
    if (_129 >= _14._m0._m0)
    {
        return;
    }
    uint _137 = _91(_129, _14._m0._m3);
    uint _165 = _14._m0._m1;
    uint _166 = _99(_129, (_14._m0._m3 * _14._m0._m5) * _14._m0._m4) * _165;
    float _180 = _23(_91(_99(_129, _14._m0._m3 * _14._m0._m5), _14._m0._m4), _14._m0._m8, _14._m0._m9, _14._m0._m10, _14._m0._m11);
    float _193 = _23(_91(_99(_129, _14._m0._m3), _14._m0._m5), _14._m0._m12, _14._m0._m13, _14._m0._m14, _14._m0._m15);
    if (_14._m0._m6 == 0u)
    {
        _11._m0[_129] = _8._m0[((((_166 + _34(_180, _14._m0._m1)) * _14._m0._m2) + _34(_193, _14._m0._m2)) * _14._m0._m3) + _137];
        return;
    }
    float _222 = clamp(_180, 0.0, float(_14._m0._m1 - 1u));
    float _227 = clamp(_193, 0.0, float(_14._m0._m2 - 1u));
    uint _230 = uint(clamp(floor(_222), 0.0, 4294967040.0));
    uint _233 = uint(clamp(floor(_227), 0.0, 4294967040.0));
    uint _238 = min((_230 + 1u), (_14._m0._m1 - 1u));
    uint _243 = min((_233 + 1u), (_14._m0._m2 - 1u));
    float _247 = _227 - float(_233);
    uint _256 = ((((_166 + _230) * _14._m0._m2) + _233) * _14._m0._m3) + _137;
    uint _278 = ((((_166 + _238) * _14._m0._m2) + _233) * _14._m0._m3) + _137;
    float _294 = _8._m0[_256] + ((_8._m0[((((_166 + _230) * _14._m0._m2) + _243) * _14._m0._m3) + _137] - _8._m0[_256]) * _247);
    _11._m0[_129] = _294 + (((_8._m0[_278] + ((_8._m0[((((_166 + _238) * _14._m0._m2) + _243) * _14._m0._m3) + _137] - _8._m0[_278]) * _247)) - _294) * (_222 - float(_230)));
}

